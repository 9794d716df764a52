"""``python -m composer_cli``: the same as the ``composer`` console script."""

import sys

from composer_cli.main import main

sys.exit(main())
