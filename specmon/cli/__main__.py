import sys

from specmon.cli.main import main

sys.exit(main())
