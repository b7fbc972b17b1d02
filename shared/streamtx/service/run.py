"""Run a service app under uvicorn (used by each service's ``__main__``)."""

from __future__ import annotations

import logging

import uvicorn
from fastapi import FastAPI


def serve(app: FastAPI, host: str, port: int) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    # No proxy-header rewriting: no service reads the client address.
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False,
                proxy_headers=False, server_header=False, timeout_graceful_shutdown=5)
