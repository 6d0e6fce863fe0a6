import os, sys
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

def pytest_report_header(config):
  from fusegrad import Device
  return f"fusegrad device: {Device.DEFAULT}"
