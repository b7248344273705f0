"""Classroom mode: in a live session the instructor sees the room's predictions before the reveal.

The instructor starts the class server (``python -m lab_utils class serve --db class.sqlite``);
it prints a join code and the instructor page's URL. Learners join from a notebook:

    from lab_utils import classroom
    classroom.join("http://10.0.0.5:8765", "K7QX2P", "otter")   # then predict(...) as usual
    classroom.leave()

    client.py     the learner's side: join / leave, sending commits and results (offline-safe)
    server.py     the HTTP server: class code, instructor token, live updates (server-sent events)
    store.py      the class in one SQLite file (a restart loses nothing)
    messages.py   what a learner may send, validated and bounded field by field
    limits.py     a token bucket per learner (a flood is refused, others are not slowed)
    instructor.html  the page: per question the distribution of guesses, a reveal; per exercise
                     how many passed and the most common mistakes
"""

from lab_utils.classroom.client import join, leave, status

__all__ = ["join", "leave", "status"]
