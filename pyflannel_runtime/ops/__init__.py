"""The typed runtime API the Ansible modules and `pyflannel` commands call."""
