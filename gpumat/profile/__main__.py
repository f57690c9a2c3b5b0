"""``python -m gpumat.profile [--gpu H100] [--json OUT] [--plot PNG] script.py [args ...]``: the
script run under :class:`gpumat.profile.Profiler`, its per-kernel table printed."""

import sys

from gpumat.profile import main

sys.exit(main())
