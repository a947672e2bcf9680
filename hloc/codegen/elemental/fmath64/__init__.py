"""f64 transcendentals without libm (<= 1 ulp), for targets whose math library cannot be
called (CUDA kernels): core.py (exp, log, pow, ...), atan.py, erf.py, log.py, trig.py."""
