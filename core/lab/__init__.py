"""The evaluation lab: replaying recorded sessions, retention probes, A/B experiments, reports.

Not needed for compacting: this is how a policy is judged on real sessions before it is chosen.
:mod:`.replay` is the one replay engine (``compactor replay``, ``compactor ab replay`` and the
benchmarks use it), :mod:`.probes` checks what a compacted view still holds, :mod:`.experiment`
assigns sessions to variants and compares them (with the tests of :mod:`.stats`), :mod:`.report` draws the HTML report (plotly,
the ``[report]`` extra).
"""
