"""`python -m cann_llm.cli ...`, the same as the `cann-llm` console script."""

import sys

from . import main

sys.exit(main())
