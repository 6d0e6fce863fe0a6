"""A griffe extension for the API pages: a docstring's doctest examples (`>>>` lines and the output under them, up to
a blank line) are shown as Python console blocks, as doctest reads them (test/test_docs.py runs them)."""
from __future__ import annotations
from typing import Any
import griffe

def fence(text: str) -> str:
  out: list[str] = []
  inside = False
  for line in text.split("\n"):
    if line.startswith(">>>") and not inside: out, inside = out + ["", "```pycon"], True  # (a blank line opens it)
    elif inside and not line.strip(): out, inside = out + ["```"], False
    out.append(line)
  return "\n".join(out + (["```"] if inside else []))

class DoctestFences(griffe.Extension):
  def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
    if obj.docstring is not None and ">>>" in obj.docstring.value: obj.docstring.value = fence(obj.docstring.value)
