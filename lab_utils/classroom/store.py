"""The class's memory: one SQLite file the instructor names (stdlib ``sqlite3``).

Everything the server knows is in the file, written before the request is answered, so a restart
(a crash, a laptop lid closed) loses nothing: the same join code and instructor token, the learners,
every committed prediction, the questions' open / closed / revealed state and the exercise results.

    learners(pseudonym, joined, left)               left is NULL while in the class
    questions(key, question, unit, choices, state, revealed, given)   given: the instructor's value
    predictions(key, pseudonym, guess, formula, measured, answer, time)   one row per learner
    results(exercise, pseudonym, passed, misconception, time)             one row per attempt
"""

from __future__ import annotations

import json
import secrets
import sqlite3
import statistics
import threading
import time
from pathlib import Path

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS learners(pseudonym TEXT PRIMARY KEY, joined REAL NOT NULL, left REAL);
CREATE TABLE IF NOT EXISTS questions(key TEXT PRIMARY KEY, question TEXT NOT NULL,
    unit TEXT NOT NULL, choices TEXT NOT NULL, state TEXT NOT NULL DEFAULT 'open',
    revealed INTEGER NOT NULL DEFAULT 0, given TEXT);
CREATE TABLE IF NOT EXISTS predictions(key TEXT NOT NULL, pseudonym TEXT NOT NULL,
    guess TEXT NOT NULL, formula REAL, measured REAL, answer TEXT, time REAL NOT NULL,
    PRIMARY KEY (key, pseudonym));
CREATE TABLE IF NOT EXISTS results(exercise TEXT NOT NULL, pseudonym TEXT NOT NULL,
    passed INTEGER NOT NULL, misconception TEXT NOT NULL, time REAL NOT NULL);
"""
CODE_ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I/L: read off a projector
MAX_LEARNERS, MAX_QUESTIONS, MAX_EXERCISES = 1000, 500, 200


class Refused(Exception):
    """A well-formed request the class cannot take (closed question, not joined, full)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class ClassStore:
    """One class in one SQLite file; safe to call from the server's threads (one lock)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._lock = threading.Lock()
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")  # readers never wait for the writer
            self._db.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable at checkpoint
            self._db.executescript(SCHEMA)
        self.code = self._meta(
            "code", lambda: "".join(secrets.choice(CODE_ALPHABET) for _ in range(6))
        )
        self.instructor_token = self._meta("instructor_token", lambda: secrets.token_urlsafe(18))

    def _meta(self, name: str, make) -> str:
        with self._lock:
            row = self._db.execute("SELECT value FROM meta WHERE name=?", (name,)).fetchone()
            if row:
                return row[0]
            value = make()
            self._db.execute("INSERT INTO meta VALUES (?, ?)", (name, value))
            return value

    def _write(self, sql: str, args: tuple) -> None:
        with self._lock:
            self._db.execute(sql, args)

    def _one(self, sql: str, args: tuple = ()):
        with self._lock:
            return self._db.execute(sql, args).fetchone()

    def _all(self, sql: str, args: tuple = ()) -> list:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    # ------------------------------------------------------------------ learners
    def join(self, pseudonym: str) -> None:
        known = self._one("SELECT 1 FROM learners WHERE pseudonym=?", (pseudonym,))
        if not known and self._one("SELECT COUNT(*) FROM learners")[0] >= MAX_LEARNERS:
            raise Refused(403, f"the class is full ({MAX_LEARNERS} learners)")
        self._write(
            "INSERT INTO learners VALUES (?, ?, NULL) ON CONFLICT(pseudonym) "
            "DO UPDATE SET left=NULL",
            (pseudonym, time.time()),
        )

    def leave(self, pseudonym: str) -> None:
        self._write("UPDATE learners SET left=? WHERE pseudonym=?", (time.time(), pseudonym))

    def require_member(self, pseudonym: str) -> None:
        row = self._one("SELECT left FROM learners WHERE pseudonym=?", (pseudonym,))
        if row is None or row[0] is not None:
            raise Refused(403, f"{pseudonym!r} has not joined this class (join first)")

    # ------------------------------------------------------------------ predictions
    def add_prediction(self, p: dict) -> None:
        self.require_member(p["pseudonym"])
        row = self._one("SELECT state FROM questions WHERE key=?", (p["key"],))
        if row is None:
            if self._one("SELECT COUNT(*) FROM questions")[0] >= MAX_QUESTIONS:
                raise Refused(403, f"this class already has {MAX_QUESTIONS} questions")
            self._write(
                "INSERT OR IGNORE INTO questions(key, question, unit, choices) VALUES (?, ?, ?, ?)",
                (p["key"], p["question"], p["unit"], json.dumps(p["choices"])),
            )
        elif row[0] == "closed":
            raise Refused(
                409,
                f"question {p['key']} is closed by the instructor: your guess "
                "stays in your notebook",
            )
        self._write(
            "INSERT OR REPLACE INTO predictions VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                p["key"],
                p["pseudonym"],
                json.dumps(p["guess"]),
                p.get("formula"),
                p.get("measured"),
                p.get("answer"),
                time.time(),
            ),
        )

    def set_question(self, key: str, action: str, value=None) -> None:
        if not self._one("SELECT 1 FROM questions WHERE key=?", (key,)):
            raise Refused(404, f"no question {key} in this class yet")
        if value is not None:
            self._write("UPDATE questions SET given=? WHERE key=?", (json.dumps(value), key))
        column, value = {
            "open": ("state", "open"),
            "close": ("state", "closed"),
            "reveal": ("revealed", 1),
            "hide": ("revealed", 0),
        }[action]
        self._write(f"UPDATE questions SET {column}=? WHERE key=?", (value, key))

    # ------------------------------------------------------------------ exercise results
    def add_result(self, r: dict) -> None:
        self.require_member(r["pseudonym"])
        known = self._one("SELECT 1 FROM results WHERE exercise=?", (r["exercise"],))
        if (
            not known
            and self._one("SELECT COUNT(DISTINCT exercise) FROM results")[0] >= MAX_EXERCISES
        ):
            raise Refused(403, f"this class already has {MAX_EXERCISES} exercises")
        self._write(
            "INSERT INTO results VALUES (?, ?, ?, ?, ?)",
            (r["exercise"], r["pseudonym"], int(r["passed"]), r["misconception"], time.time()),
        )

    # ------------------------------------------------------------------ what the page shows
    def snapshot(self) -> dict:
        """The whole room as the instructor page draws it (plain JSON)."""
        questions = []
        for key, question, unit, choices, state, revealed, given in self._all(
            "SELECT key, question, unit, choices, state, revealed, given FROM questions "
            "ORDER BY key"
        ):
            rows = self._all(
                "SELECT guess, formula, measured, answer FROM predictions "
                "WHERE key=? ORDER BY time",
                (key,),
            )
            formulas = [r[1] for r in rows if r[1] is not None]
            measured = [r[2] for r in rows if r[2] is not None]
            answers = [r[3] for r in rows if r[3] is not None]
            questions.append(
                {
                    "key": key,
                    "question": question,
                    "unit": unit,
                    "choices": json.loads(choices),
                    "state": state,
                    "revealed": bool(revealed),
                    "given": None if given is None else json.loads(given),
                    "guesses": [json.loads(r[0]) for r in rows],
                    # what the learners' own notebooks revealed: the formula is the same for all;
                    # measurements differ per machine, so the median of those reported
                    "formula": formulas[-1] if formulas else None,
                    "measured": statistics.median(measured) if measured else None,
                    "measured_n": len(measured),
                    "answer": max(set(answers), key=answers.count) if answers else None,
                }
            )
        return {
            "learners": self._one("SELECT COUNT(*) FROM learners WHERE left IS NULL")[0],
            "questions": questions,
            "exercises": self._exercises(),
        }

    def _exercises(self) -> list[dict]:
        out = []
        for (name,) in self._all("SELECT DISTINCT exercise FROM results ORDER BY exercise"):
            tried = self._one(
                "SELECT COUNT(DISTINCT pseudonym) FROM results WHERE exercise=?", (name,)
            )[0]
            passed = self._one(
                "SELECT COUNT(DISTINCT pseudonym) FROM results WHERE exercise=? AND passed=1",
                (name,),
            )[0]
            common = self._all(
                "SELECT misconception, COUNT(DISTINCT pseudonym) AS n FROM results"
                " WHERE exercise=? AND passed=0 GROUP BY misconception "
                "ORDER BY n DESC, misconception LIMIT 3",
                (name,),
            )
            out.append(
                {
                    "exercise": name,
                    "tried": tried,
                    "passed": passed,
                    "misconceptions": [{"text": m, "learners": n} for m, n in common],
                }
            )
        return out

    def close(self) -> None:
        with self._lock:
            self._db.close()
