"""BEAM search lives in codegen/search.py (it chooses a kernel's optimizations); this name is kept for old imports."""
from fusegrad.codegen.search import beam_search, candidate_opts, time_kernel  # noqa: F401
