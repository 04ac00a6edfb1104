"""The suite's verification tools, apart from the product they check.

- `equivalence`: every combination of the towers' options trains what one
  device trains.
- `accidents`: every accident on every kind of run, and what each leaves.
- `planted_bugs`: known bugs planted one at a time, and the quick check
  that catches each (it runs a checkout's tests).
"""
