import sys

from fedstream.cli import main

sys.exit(main())
