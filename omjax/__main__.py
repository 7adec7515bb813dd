import sys

from omjax.cli import main

sys.exit(main())
