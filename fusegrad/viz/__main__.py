"""`python -m fusegrad.viz trace.json`: serve a trace VIZ wrote (VIZ_OUT=trace.json), or write it as a page (--html)."""
import argparse, sys
from fusegrad.helpers import VIZ_PORT
from fusegrad.viz import load, serve, write

parser = argparse.ArgumentParser(prog="python -m fusegrad.viz", description=__doc__)
parser.add_argument("trace", help="a trace file written by VIZ=1 VIZ_OUT=trace.json")
parser.add_argument("--html", metavar="PAGE", help="write the viewer's page (one HTML file) here instead of serving")
parser.add_argument("--port", type=int, default=VIZ_PORT.value, help="port on 127.0.0.1 (default: VIZ_PORT)")
args = parser.parse_args()
try: trace = load(args.trace)
except ValueError as e: sys.exit(f"error: {e}")
if args.html:
  write(args.html, trace)
  print(f"VIZ: wrote {args.html}")
else: serve(trace, args.port)
