"""The README's runnable example runs as written."""
import pathlib
import re

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def python_blocks():
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_examples_run():
    blocks = [b for b in python_blocks() if "import" in b]
    assert blocks, "README lost its runnable example"
    for code in blocks:
        exec(compile(code, str(README), "exec"), {"__name__": "__readme__"})
