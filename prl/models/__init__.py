"""Models the project builds itself: the embedded tiny model (``tiny``)."""
