import sys

from lidarmt.cli import main

sys.exit(main())
