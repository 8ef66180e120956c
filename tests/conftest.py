import os
import sys

# Test helpers (brute-force enumeration, high-precision reference) live beside the tests.
sys.path.insert(0, os.path.dirname(__file__))
