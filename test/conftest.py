import os, sys
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

def pytest_report_header(config):
  from fusegrad import Device
  return f"fusegrad device: {Device.DEFAULT}"

def pytest_configure(config):
  if os.environ.get("SCHEDULE_CACHE_CHECK"):  # compare every schedule cache hit with a fresh schedule (slow)
    from test.schedule_check import checked_cache
    config._schedule_check = checked_cache()
    config._schedule_check.__enter__()

import pytest

@pytest.hookimpl(hookwrapper=True)
def pytest_pyfunc_call(pyfuncitem):
  """A test that needs a dtype the device lacks (UnsupportedDTypeError: float64 on WEBGPU) skips with that reason."""
  outcome = yield
  from fusegrad.renderer import UnsupportedDTypeError
  if outcome.excinfo is not None and isinstance(outcome.excinfo[1], UnsupportedDTypeError):
    outcome.force_exception(pytest.skip.Exception(str(outcome.excinfo[1]), _use_item_location=True))
