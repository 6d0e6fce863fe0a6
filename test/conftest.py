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
