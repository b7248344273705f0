"""Interview practice (lab 12): quick-math drills graded by the calculators."""
