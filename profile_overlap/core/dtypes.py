"""Element sizes in bytes, by dtype name: torch's names and the spellings profiler traces use
("c10::BFloat16", "Float", ...). One table for the whole package."""

ELEMENT_BYTES = {
    "float": 4,
    "Float": 4,
    "float32": 4,
    "double": 8,
    "Double": 8,
    "float64": 8,
    "c10::Half": 2,
    "Half": 2,
    "half": 2,
    "float16": 2,
    "c10::BFloat16": 2,
    "BFloat16": 2,
    "bfloat16": 2,
    "long int": 8,
    "Long": 8,
    "int64": 8,
    "long": 8,
    "int": 4,
    "Int": 4,
    "int32": 4,
    "short int": 2,
    "Short": 2,
    "signed char": 1,
    "Char": 1,
    "unsigned char": 1,
    "Byte": 1,
    "uint8": 1,
    "int8": 1,
    "bool": 1,
    "Bool": 1,
    "c10::Float8_e4m3fn": 1,
    "Float8_e4m3fn": 1,
    "c10::Float8_e5m2": 1,
    "Float8_e5m2": 1,
}
"""Element size by any dtype name a trace or a flag may carry."""

DTYPE_BYTES = {name: ELEMENT_BYTES[name] for name in ("float32", "bfloat16", "float16")}
"""The dtypes a job can use (--dtype), by torch's name."""
