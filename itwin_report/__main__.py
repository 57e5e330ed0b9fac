"""Allow ``python -m itwin_report``."""

from itwin_report.cli import main

if __name__ == "__main__":
    main()
