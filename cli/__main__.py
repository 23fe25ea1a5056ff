"""`python -m cli`: the `quotaflow` command without the installed console script (I/O shell)."""

import sys

from cli.main import main

sys.exit(main())
