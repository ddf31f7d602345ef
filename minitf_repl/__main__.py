"""`python -m minitf_repl`: the same as the `minitf` command."""

from .cli import main

if __name__ == "__main__":
    main()
