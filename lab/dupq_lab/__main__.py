"""``python -m dupq_lab COMMAND`` is ``dupq-lab COMMAND`` (for a child process, or where the script is not installed)."""

from dupq_lab.cli import main

main()
