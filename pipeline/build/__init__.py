"""Builder: load a suite at a commit and compile it into a bundle (manifest + artifacts)."""
