"""`python -m pipeline.cli`: the `benchfarm` command."""

import sys

from pipeline.cli import main

sys.exit(main())
