"""The REST API on the Faust worker's web server (`routes.register` binds every view)."""
