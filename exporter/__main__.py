"""`python -m exporter`: the same commands as `gpu-exporter`."""

import sys

from exporter.cli import main

sys.exit(main())
