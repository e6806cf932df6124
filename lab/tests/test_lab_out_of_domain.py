"""The lab's out-of-domain script: the questions file it writes for a help-desk task."""

from __future__ import annotations

from dupq.evaluation import tasks
from dupq_lab.experiments import out_of_domain as script


def test_write_questions_writes_the_collection_one_a_line_and_never_a_new_question(tmp_path):
    file = tasks.HelpDeskPairs(
        domains=["home"] * 3,
        splits=["dev", "test", "dev"],
        new=["My tap drips, what now?", "Best way to unclog a sink?", "Why is my\nboiler loud?"],
        old=["How do I fix a leaking faucet?", "How can I clear a blocked drain?", "Why does my boiler bang?"],
        sha256="",
    )
    task = tasks.help_desk_task(
        file, "dev", ["What is love?", "Why is the sky\nblue?", "How can I clear a blocked drain?"]
    )
    out = tmp_path / "runs" / "questions.txt"  # its folder does not exist yet
    script.write_questions(task, out)
    written = out.read_text(encoding="utf-8").split("\n")
    assert written == [*file.old, "What is love?", "Why is the sky blue?", ""]  # each once; a newline inside is a space
    assert not set(written) & set(file.new)
