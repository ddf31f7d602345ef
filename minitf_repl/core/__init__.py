"""The engine: torch only, never a UI library. Each module is named for what it holds."""
