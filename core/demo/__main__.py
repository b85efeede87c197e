"""`python -m core.demo`: seed the configured database, or run live demo replicas (`--replicas N`)."""

import sys

from core.demo.seed import main

sys.exit(main())
