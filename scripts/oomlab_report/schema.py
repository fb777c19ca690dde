"""schema.py — the typed contract between an experiment's driver (its results' `summary`) and
its renderer: each experiment folder holds summary.schema.json, a JSON Schema subset that
check_results.py validates every results file's summary against, so a driver that renames or
drops a key the renderer reads fails in CI, not in a stale report.

The subset: "type" (a name or a list of: object, array, number, integer, string, boolean,
null), "required" (keys of an object), "properties" (key -> schema), "items" (the schema of
every array element), "additionalProperties" (false, or the schema of keys not in
"properties"). An unknown keyword is an error in the schema itself, so a typo cannot
silently accept everything.
"""
KEYWORDS = {"type", "required", "properties", "items", "additionalProperties", "description"}
TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}


def _is(value, name):
    if name == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if name == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if name not in TYPES:
        raise ValueError(f"unknown type '{name}' in the schema")
    return isinstance(value, TYPES[name])


def errors(value, schema, where="summary"):
    """Every way `value` breaks `schema`, as 'where: message' strings (empty: valid)."""
    out = []
    unknown = set(schema) - KEYWORDS
    if unknown:
        return [f"{where}: schema has unknown keyword(s) {sorted(unknown)}"]
    types = schema.get("type")
    if types is not None:
        names = types if isinstance(types, list) else [types]
        if not any(_is(value, n) for n in names):
            return [f"{where}: expected {' or '.join(names)}, got {type(value).__name__}"]
    if isinstance(value, dict):
        for key in schema.get("required", []):
            if key not in value:
                out.append(f"{where}: missing key '{key}'")
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        for key, v in value.items():
            if key in props:
                out += errors(v, props[key], f"{where}.{key}")
            elif extra is False:
                out.append(f"{where}: unexpected key '{key}'")
            elif isinstance(extra, dict):
                out += errors(v, extra, f"{where}.{key}")
    if isinstance(value, list) and "items" in schema:
        for i, v in enumerate(value):
            out += errors(v, schema["items"], f"{where}[{i}]")
    return out
