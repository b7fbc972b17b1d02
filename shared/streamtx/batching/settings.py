"""Settings of batched log writes (PIP-160), validated like Pulsar's broker.conf.

Embed :class:`BatchingSettings` in a service's settings (env ``..._BATCHING__MAX_RECORDS``
and so on) and build writers with ``BufferedWriter(ledger, encode, **s.writer_kwargs())``.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, field_validator

from streamtx.batching.writer import (
    FlushPolicy,
    WriterOptions,
    default_max_bytes,
    default_max_delay_s,
    default_max_records,
)

__all__ = ["BatchingSettings"]

min_max_records = 10
min_max_bytes = 128 << 10  # 128 KiB
min_max_delay_ms = 1.0


class BatchingSettings(BaseModel):
    """Whether and how a log batches its records: thresholds and flush policy."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = True
    # "auto": no timer while the log is idle, gather while appends are in flight;
    # "fixed": Pulsar's timer of max_delay_ms from each batch's first record.
    policy: FlushPolicy = "auto"
    max_records: int = default_max_records  # records per entry
    max_bytes: int = default_max_bytes  # bytes per entry, header included (4 MiB)
    max_delay_ms: float = default_max_delay_s * 1000  # since a batch's first record

    @field_validator("max_records")
    @classmethod
    def _check_records(cls, value: int) -> int:
        if value < min_max_records:
            raise ValueError(f"max_records must be at least {min_max_records} records, got {value}")
        return value

    @field_validator("max_bytes")
    @classmethod
    def _check_bytes(cls, value: int) -> int:
        if value < min_max_bytes:
            raise ValueError(
                f"max_bytes must be at least {min_max_bytes} bytes (128 KiB), got {value}"
            )
        return value

    @field_validator("max_delay_ms")
    @classmethod
    def _check_delay(cls, value: float) -> float:
        if not value >= min_max_delay_ms:
            raise ValueError(f"max_delay_ms must be at least {min_max_delay_ms:g} ms, got {value}")
        return value

    def writer_kwargs(self) -> WriterOptions:
        """The keyword arguments of :class:`~streamtx.batching.BufferedWriter` these settings give."""
        return WriterOptions(
            max_records=self.max_records,
            max_bytes=self.max_bytes,
            max_delay_s=self.max_delay_ms / 1000,
            policy=self.policy,
            enabled=self.enabled,
        )
