"""Every answer the fake APIs serve, held to the providers' published OpenAPI documents (tests/fixtures/openapi).

    check = OpenAPICheck("vastai")
    problems = check.answer("GET", "/api/v0/instances/9000001/", 200, body)   # [] when it conforms

The fake's path is matched to the document's operation (the server's base path, ``/v1`` for RunPod v1 and
``/api/v1`` for Lambda's 1.5.3, is dropped; vast's trailing ``/`` too; Lambda's answers are matched in its 1.8.3
document alone, ``ANSWERS_FROM``), and the body is validated with ``jsonschema``
(Draft 2020-12; an OpenAPI 3.0 ``nullable`` is read as the ``null`` type) against the response schema of that
status. A 2xx status the document does not list for the operation, a 2xx for an operation it does not have, a 204
with a body and a body that fails its schema are problems; an error status (4xx, 5xx) that the document does not
list is not, since the documents list errors only in part. ``overrides.json`` is applied first, each change with its source.
AutoDL publishes no document: its answers are not checked (``OpenAPICheck("autodl").documented`` is False).
"""

from __future__ import annotations

import copy
import json
import pathlib
import re

from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "openapi"

# provider -> [(document, the path prefix the fake serves it under)]
DOCUMENTS = {
    "runpod": [("runpod-v1.json", "/v1"), ("runpod-v2.json", "")],
    "vastai": [("vastai.json", "")],
    "lambda": [("lambda.json", "/api/v1"), ("lambda-1.8.3.json", "")],
    "autodl": [],
}
# where a provider has two documents of the same API, the one its answers are held to: Lambda's newest (1.8.3, the
# API the collection talks to); the older one still holds the request bodies (operation() finds it first)
ANSWERS_FROM = {"lambda": "lambda-1.8.3.json"}


def _nullable(node):
    """OpenAPI 3.0 ``nullable: true`` -> JSON Schema's null type (in place, everywhere)."""
    if isinstance(node, dict):
        if node.get("nullable") is True:
            kind = node.get("type")
            if isinstance(kind, str):
                node["type"] = [kind, "null"]
            elif "$ref" in node or "allOf" in node:
                inner = {key: node.pop(key) for key in ("$ref", "allOf") if key in node}
                node["anyOf"] = [inner, {"type": "null"}]
            if "enum" in node and None not in node["enum"]:
                node["enum"] = list(node["enum"]) + [None]
        for value in node.values():
            _nullable(value)
    elif isinstance(node, list):
        for value in node:
            _nullable(value)
    return node


def load(name):
    return json.loads((FIXTURES / name).read_text(encoding="utf-8"))


def _apply_overrides(provider, docs):
    for row in load("overrides.json").get(provider, []):
        applied = False
        for doc in docs:
            schemas = doc.get("components", {}).get("schemas", {})
            if "schema" in row and row["schema"] in schemas:
                prop = schemas[row["schema"]]["properties"][row["property"]]
                if "replace" in row:
                    schemas[row["schema"]]["properties"][row["property"]] = copy.deepcopy(row["replace"])
                if "add_enum" in row:
                    prop["enum"] = list(prop["enum"]) + [v for v in row["add_enum"] if v not in prop["enum"]]
                applied = True
            elif "operation" in row:
                method, path = row["operation"].split(" ", 1)
                op = doc.get("paths", {}).get(path, {}).get(method.lower())
                if op is None:
                    continue
                schema = op["responses"][row["status"]]["content"]["application/json"]["schema"]
                inner = schema["properties"][row["property"]]
                schema["properties"][row["property"]] = {"anyOf": [inner, {"type": "null"}]}
                applied = True
        if not applied:
            raise ValueError("overrides.json: a %s row matches nothing in the vendored documents: %r" % (provider, row))


def _template(path):
    return re.compile("^" + re.sub(r"\\\{[^/]+\\\}", "[^/]+", re.escape(path)) + "$")


class OpenAPICheck:
    def __init__(self, provider):
        self.provider = provider
        docs = [_nullable(load(name)) for name, _prefix in DOCUMENTS[provider]]
        _apply_overrides(provider, docs)
        self.documented = bool(docs)
        self.operations = []  # (prefix, compiled template, document path, doc index)
        self.docs = docs
        registry = Registry()
        for index, ((_name, prefix), doc) in enumerate(zip(DOCUMENTS[provider], docs)):
            registry = registry.with_resource("urn:doc%d" % index,
                                              Resource.from_contents(doc, default_specification=DRAFT202012))
            for path in doc["paths"]:
                self.operations.append((prefix, _template(path), path, index))
        self.registry = registry
        names = [name for name, _prefix in DOCUMENTS[provider]]
        self.answers_from = names.index(ANSWERS_FROM[provider]) if provider in ANSWERS_FROM else None

    def operation(self, method, path, only=None):
        """(document index, document path, operation) for the fake's ``method path``, or None; ``only``: in that
        document alone."""
        path = path.rstrip("/") or "/"
        for prefix, template, doc_path, index in self.operations:
            if (prefix and not path.startswith(prefix + "/")) or (only is not None and index != only):
                continue
            rest = path[len(prefix):]
            if template.match(rest):
                op = self.docs[index]["paths"][doc_path].get(method.lower())
                if op is not None:
                    return index, doc_path, op
        return None

    def _response(self, index, response):
        ref = response.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/components/responses/"):
            return self.docs[index]["components"]["responses"][ref.rsplit("/", 1)[1]]
        return response

    def answer(self, method, path, status, body, raw=b""):
        """The problems of one answer (a list of sentences; [] when it conforms)."""
        if not self.documented:
            return []
        where = "%s %s -> %s" % (method, path, status)
        found = self.operation(method, path, self.answers_from)
        if found is None:  # an error for a path the provider does not have (a test asks for one) is fine
            return [] if status >= 400 else ["%s: the %s document has no such operation" % (where, self.provider)]
        index, doc_path, op = found
        responses = op.get("responses", {})
        response = responses.get(str(status))
        if response is None:
            if status >= 400:
                return []  # the documents list error answers only in part
            return ["%s: %s %s documents no %s answer (it documents %s)"
                    % (where, method, doc_path, status, ", ".join(sorted(responses)))]
        response = self._response(index, response)
        content = response.get("content") or {}
        if status == 204 or not content:
            if status == 204 and raw:
                return ["%s: a 204 answer has no body, the fake sent %d bytes" % (where, len(raw))]
            return []
        media = content.get("application/json") or content.get("application/problem+json")
        if media is None or "schema" not in media:
            return []
        pointer = "/paths/%s/%s/responses/%s/content/%s/schema" % (
            doc_path.replace("~", "~0").replace("/", "~1"), method.lower(),
            str(status) if str(status) in responses else "default",
            ("application/json" if "application/json" in content else "application/problem+json").replace("/", "~1"))
        if "$ref" in responses.get(str(status), {}):
            name = responses[str(status)]["$ref"].rsplit("/", 1)[1]
            kind = "application/json" if "application/json" in content else "application/problem+json"
            pointer = "/components/responses/%s/content/%s/schema" % (name, kind.replace("/", "~1"))
        validator = Draft202012Validator({"$ref": "urn:doc%d#%s" % (index, pointer)}, registry=self.registry)
        return ["%s: %s at %s" % (where, err.message[:300], "/".join(str(p) for p in err.absolute_path) or "(body)")
                for err in validator.iter_errors(body)]
