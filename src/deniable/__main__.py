"""``python -m deniable``: the same command as ``deniable``."""

from deniable.cli.main import main

if __name__ == "__main__":
    main(prog_name="deniable")
