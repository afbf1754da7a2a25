"""Real vLLM in the loop: install (``install.sh``), a locally built tiny model (``tiny_model.py``),
launch settings and a process handle (``launch.py``), the CLI wrapper (``serve.py``) and the
calibration of the emulator's CPU profile (``calibrate.py``). See README.md in this folder."""
