"""``make faults``: flows driven on the local stack while faults are injected at seeded random points, then counted.

``python -m faults --seed N`` replays a run. ``faults.run`` drives the flows, ``faults.flows`` says what each flow
does and what its end state must be, ``faults.inject`` injects the faults, ``faults.report`` writes the table.
"""
