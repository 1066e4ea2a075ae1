"""The query service: configuration, service core and HTTP API (FastAPI + uvicorn).

* :func:`deniable.server.config.load_config` reads the TOML configuration;
* :class:`deniable.server.service.Service` answers for authenticated principals;
* :func:`deniable.server.app.create_app` builds the HTTP API;
* :func:`deniable.server.run.serve` runs it under uvicorn with worker processes.

Import the submodules directly; this package imports nothing heavy by itself.
"""
