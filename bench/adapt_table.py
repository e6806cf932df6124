"""The saved `dupq adapt` run (docs/results/adapt.json) as a one-row Markdown table; nothing is measured here.

    python bench/adapt_table.py

Reads what the command printed: how many questions it adapted to, the teacher's and the fine-tuning's
seconds, and the model's mean cosine to the teacher before and after, and the help-desk dev half's
Recall@1 of the bundled and the adapted model (docs/results/out_of_domain_dev.json and
out_of_domain_adapted_dev.json, from ``bench/out_of_domain.py --split dev [--model runs/adapted]``).
"""

from __future__ import annotations

import re

from saved import last_json, saved_output


def recall_at_1(name: str) -> float:
    return last_json(name)["dupq"]["recall@1"]


def main() -> None:
    text = "\n".join(saved_output("adapt.json"))
    questions = re.search(r"adapting the .* to ([\d,]+) questions", text).group(1)
    teacher, tuning = re.search(r"\(teacher (\d+)s, fine-tuning (\d+)s\)", text).groups()
    before, after = re.search(r"cosine to the teacher ([\d.]+) -> ([\d.]+)", text).groups()
    print("| questions | teacher | fine-tuning | cosine to the teacher | help-desk dev Recall@1 |")
    print("| --- | --- | --- | --- | --- |")
    print(
        f"| {questions} | {teacher} s | {tuning} s | {before} -> {after} "
        f"| {recall_at_1('out_of_domain_dev.json'):.3f} -> {recall_at_1('out_of_domain_adapted_dev.json'):.3f} |"
    )


if __name__ == "__main__":
    main()
