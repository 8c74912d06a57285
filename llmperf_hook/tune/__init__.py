"""Stage package: see DESIGN.md."""
