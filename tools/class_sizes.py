#!/usr/bin/env python3
"""Prints the data members and public methods of every class and struct in csrc/live's headers,
and fails (exit 1) where one has more than the layout allows: data members, Session 15 and any
other class 20; public methods (constructors included, not the destructor or deleted ones), 20
for every class, Session included. A reader of this project's headers (clang-formatted, one
declaration per statement), not of C++ in general.
"""
import re
import sys
from pathlib import Path

LIMITS = {"Session": 15}
DEFAULT_LIMIT = 20
METHOD_LIMIT = 20
HEAD = re.compile(r"\n(class|struct) (\w+)\b[^;{(]*\{")


def matching_brace(text: str, open_at: int) -> int:
    """The index just past the brace that closes the one before `open_at`."""
    depth, i = 1, open_at
    while depth:
        depth += (text[i] == "{") - (text[i] == "}")
        i += 1
    return i


def top_level_statements(body: str) -> list:
    """The class body's statements, with nested types and function bodies cut out."""
    flat, i = [], 0
    while i < len(body):
        nested = re.match(r"(struct|class|enum)\b[^;{]*\{", body[i:])
        if nested:
            i = matching_brace(body, i + nested.end())
            continue
        if body[i] == "{":  # a function body or a brace initializer
            i = matching_brace(body, i + 1)
            flat.append(";")
            continue
        flat.append(body[i])
        i += 1
    text = re.sub(r"//[^\n]*", "", "".join(flat))
    return [s.strip() for s in text.split(";") if s.strip()]


def sizes(text: str, head: re.Match) -> tuple:
    body = text[head.end():matching_brace(text, head.end()) - 1]
    section = "private" if head.group(1) == "class" else "public"
    members = methods = 0
    for statement in top_level_statements(body):
        for label in re.findall(r"\b(public|private|protected):", statement):
            section = label
        statement = re.sub(r"\b(public|private|protected):", "", statement).strip()
        if not statement or statement.startswith(("using ", "friend ", "static constexpr")):
            continue
        declarator = statement.split("=")[0]
        if "(" in declarator:
            if section == "public" and not statement.startswith("~") and "delete" not in statement:
                methods += 1
            continue
        while re.search(r"<[^<>]*>", declarator):  # template arguments hold commas too
            declarator = re.sub(r"<[^<>]*>", "", declarator)
        members += declarator.count(",") + 1
    return members, methods


def main() -> int:
    csrc = Path(__file__).resolve().parent.parent / "csrc"
    failed = False
    for header in sorted(csrc.rglob("*.h")):
        text = header.read_text(encoding="utf-8")
        for head in HEAD.finditer(text):
            name = head.group(2)
            members, methods = sizes(text, head)
            limit = LIMITS.get(name, DEFAULT_LIMIT)
            too_many = []
            if members > limit:
                too_many.append(f"more than {limit} data members")
            if methods > METHOD_LIMIT:
                too_many.append(f"more than {METHOD_LIMIT} public methods")
            failed |= bool(too_many)
            if "--quiet" not in sys.argv or too_many:
                print(f"{name:22s} {members:3d} data members {methods:3d} public methods  "
                      f"{header.relative_to(csrc)}" + (f"  ({'; '.join(too_many)})" if too_many else ""))
    print("class sizes in csrc/: " + ("too large" if failed else "within the limits"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
