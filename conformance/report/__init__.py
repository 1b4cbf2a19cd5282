"""Reports of a suite run (terminal, JSON, JUnit, Markdown, HTML) and engine reports."""
