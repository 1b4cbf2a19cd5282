"""Case files: reading, validating and describing the specification (cases, the vocabulary a
snippet may use, the feature registry, the source documents) before anything runs."""
