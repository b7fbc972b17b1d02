"""The base of every request body the services parse: strict, so a wrong JSON type is a 400.

pydantic's lax mode turns ``true`` into 1, ``"60000"`` into 60000 and ``0`` into
False: ``{"timeout_ms": true}`` opened a transaction with a 1 ms timeout (issue 21
item 11). A body is parsed in strict mode instead: an integer field takes a JSON
integer, a boolean field a JSON boolean, a string field a string. Enumerations
stay lax (:data:`Lax`): FastAPI validates the decoded JSON as Python objects, and
strict mode would take only enum instances there, refusing every JSON string.
"""

from __future__ import annotations

import binascii
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Strict,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
)

#: ``Annotated[SomeEnum, Lax]``: an enumeration field of a strict body, given as its JSON string value.
Lax = Strict(False)


class StrictBody(BaseModel):
    """A request body (public or internal) parsed strictly: no coercion between JSON types.

    One exception, JSON Schema's own: a number with no fraction (``5.0``) is an integer,
    as the OpenAPI documents say (``"type": "integer"``); ``5.5`` is not.
    """

    model_config = ConfigDict(strict=True)

    @field_validator("*", mode="before")
    @classmethod
    def _integral_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        if type(value) is float and value.is_integer() and info.field_name is not None \
                and _takes_int(cls.model_fields[info.field_name].annotation):
            return int(value)
        return value


def _takes_int(annotation: Any) -> bool:
    return annotation is int or int in getattr(annotation, "__args__", ())


#: Canonical base64 (RFC 4648, padded), as the OpenAPI document says; :func:`decode_value` accepts
#: exactly these (a2b_base64's strict mode alone also took "ffcb====" and "5Ber=").
BASE64_PATTERN = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"


def decode_value(value: str) -> bytes:
    """A message's ``value``: strict base64 (ValueError otherwise); the empty string is no bytes."""
    if len(value) % 4 or value.endswith("==="):  # cheap, and with strict mode: BASE64_PATTERN exactly
        raise ValueError("is not base64")
    try:
        return binascii.a2b_base64(value, strict_mode=True) if value else b""
    except binascii.Error as exc:
        raise ValueError("is not base64") from exc


def _check_base64(value: str) -> str:
    decode_value(value)
    return value


#: A body's base64 field (message values): the pattern in the OpenAPI document, so a
#: schema-valid request is never refused for it.
Base64Text = Annotated[str, AfterValidator(_check_base64),
                       WithJsonSchema({"type": "string", "pattern": BASE64_PATTERN})]
