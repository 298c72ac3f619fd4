import sys

from pyflannel_controller.cli import main

sys.exit(main())
