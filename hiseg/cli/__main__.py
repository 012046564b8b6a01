"""``python -m hiseg.cli ARGS``: the ``hiseg`` command."""
import sys

from . import main

sys.exit(main())
