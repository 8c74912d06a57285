"""R89's review of H205 (bash arrays, IFS): cases compared with bash 5.2 itself (`_same_as_bash`: the script runs in
the real bash with stub launchers; llmperf reads the same launch, or refuses where bash stops)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.launch.test_front_end_h197 import _same_as_bash

T = "torchrun --nproc_per_node 2 pretrain_gpt.py --num-layers 2"

UNSPLIT_WORDS = {  # bash manual 3.2.5.2: the word of `case` and the operands of `[[ ]]` are expanded, never split
    "case_word_at_the_script_s_ifs": f"IFS=,\nX=a,b\ncase $X in a,b) Y=ok;; *) Y=no;; esac\n{T} --xx $Y\n",
    "case_word_over_lines": f"IFS=,\nX=a,b\ncase $X in\n  a,b) Y=ok;;\n  *) Y=no;;\nesac\n{T} --xx $Y\n",
    "case_word_with_a_blank": f"X='a b'\ncase $X in 'a b') Y=ok;; *) Y=no;; esac\n{T} --xx $Y\n",
    "case_word_empty": f"X=\ncase $X in '') Y=ok;; *) Y=no;; esac\n{T} --xx $Y\n",
    "double_brackets_at_the_script_s_ifs": f"IFS=,\nX=a,b\nif [[ $X == a,b ]]; then Y=ok; else Y=no; fi\n{T} --xx $Y\n",
}


@pytest.mark.parametrize("name", UNSPLIT_WORDS)
def test_words_bash_does_not_split(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """H205's IFS splitting split these at `,` (`case a b in` matched no arm: Y=no, where bash takes `a,b)`); a
    blank in the case word already parted it before."""
    _same_as_bash(UNSPLIT_WORDS[name], [], tmp_path, monkeypatch)


KEYS = {  # bash manual 6.7: `"${!NAME[@]}"` one word per key; `"${!NAME[*]}"` one word, joined at IFS's first character
    "a_key_with_a_blank": "declare -A M=([\"a b\"]=1 ['c']=2)\n" + T + " --keys \"${!M[@]}\" --cnt ${#M[@]}\n",
    "looped_over": "declare -A M=([\"a b\"]=1)\nfor k in \"${!M[@]}\"; do X=\"<$k>\"; done\n" + T + " --xx \"$X\"\n",
    "starred_at_the_script_s_ifs": "declare -A M=([tp]=2 [pp]=4)\nA=([1]=x [4]=y)\nIFS=,\n" + T +
                                   " --keys \"${!M[*]}\" --xx \"${!A[*]}\"\n",
    "unquoted_at_the_script_s_ifs": "declare -A M=([a,b]=1)\nIFS=,\n" + T + " --keys ${!M[@]}\n",
}


@pytest.mark.parametrize("name", KEYS)
def test_an_associative_array_s_keys_as_words(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """H205 listed the keys joined at blanks (`"${!M[@]}"` of the key `a b`: two words) and `"${!M[*]}"` at a blank
    whatever IFS the script set."""
    _same_as_bash(KEYS[name], [], tmp_path, monkeypatch)


NESTED = {  # bash manual 3.2.5.2: an `if` that sets nothing of an array leaves it as it was
    "indexed_on_one_line": f"A=(x y)\nif [ -f c1 ]; then if [ -f c2 ]; then B=1; fi; fi\n{T} --vals ${{A[@]}}\n",
    "indexed": f"A=(x y)\nif [ -f c1 ]; then\n  if [ -f c2 ]; then\n    B=1\n  fi\nfi\n{T} --vals ${{A[@]}}\n",
    "associative": (f"declare -A M=([a]=1)\nif [ -f c1 ]; then\n  if [ -f c2 ]; then\n    B=1\n  fi\nfi\n"
                    f"{T} --xx ${{M[a]}} --vals ${{M[@]}}\n"),
    "an_exiting_first_branch": f"A=(x)\nif [ -f c1 ]; then A+=(z); exit 1; else B=1; fi\n{T} --vals ${{A[@]}}\n",
    "an_exiting_last_branch": (f"A=(x)\nif [ ! -f c1 ]; then\n  B=1\nelse\n  A+=(z)\n  exit 1\nfi\n"
                               f"{T} --vals ${{A[@]}}\n"),
}


@pytest.mark.parametrize("name", NESTED)
def test_arrays_past_nested_undecided_ifs(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every array was counted as settled by an inner undecided `if` (undecided_branches._merge_arrays returned
    them all), so the outer branch noted each as assigned a value only running the script gives: past the outer
    `fi`, A was unknown (`${A[@]}` left as written) though no branch touched it."""
    _same_as_bash(NESTED[name], [], tmp_path, monkeypatch)


OPERATOR_WORDS = {  # bash manual 3.5.3 `${X:-word}`, 3.5.7: the expansion's result is split at IFS, literal text too
    "a_variable": "IFS=,\nX=a,b\n" + T + " --vals ${Y:-$X}\n",
    "literal_text": "IFS=,\n" + T + " --vals ${Y:-p,q} --xx ${Y:-p q}\n",
    "text_and_a_variable": "IFS=,\nX=a,b\n" + T + " --vals ${Y:-x $X}\n",
    "alternative": "IFS=,\nX=a,b\nY=1\n" + T + " --vals ${Y:+$X}\n",
    "blanks_as_before": "X='a b'\n" + T + " --vals ${Y:-$X} ${Y:-\"$X\"}\n",
    "a_quoted_variable": "IFS=,\nX=a,b\n" + T + " --vals ${Y:-\"$X\"} ${Y:-'p,q'}\n",
}


@pytest.mark.parametrize("name", OPERATOR_WORDS)
def test_an_operator_word_split_at_the_script_s_ifs(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """H205 split `$X` at the script's IFS but the word of `${Y:-$X}` at blanks (`a,b` one word where bash gives
    two)."""
    _same_as_bash(OPERATOR_WORDS[name], [], tmp_path, monkeypatch)



ELEMENT_APPENDS = {  # bash manual 3.4 (`+=` appends to a variable's value), 6.7 (`name[subscript]=value`)
    "indexed": "A=(1 2)\nA[1]+=3\nA[4]+=x\n" + T + " --vals ${A[@]} --keys ${!A[@]}\n",
    "associative": "declare -A M=([a]=1)\nM[a]+=2\nM[b]+=--x\n" + T + " --vals ${M[a]} ${M[b]} --cnt ${#M[@]}\n",
    "by_a_variable_key": "declare -A M=([tp]=1)\nk=tp\nM[$k]+=6\n" + T + " --xx ${M[tp]}\n",
    "an_arithmetic_index": "A=(a b)\ni=0\nA[i+1]+=c\n" + T + " --vals ${A[@]}\n",
    "a_plain_variable": "X=a\nX[0]+=b\n" + T + " --vals ${X[@]}\n",
}


@pytest.mark.parametrize("name", ELEMENT_APPENDS)
def test_an_element_appended_to(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`A[1]+=3` was no assignment to the reading (the element kept its value: `1 2` where bash has `1 23`)."""
    _same_as_bash(ELEMENT_APPENDS[name], [], tmp_path, monkeypatch)


SCALAR_TO_AN_ARRAY = {  # bash manual 6.7: "Referencing an array variable without a subscript is equivalent to
    # referencing with a subscript of 0"; so is assigning one (bash 5.2.15 run)
    "indexed": "A=(x y)\nA=z\n" + T + " --vals ${A[@]} --xx ${A[0]}\n",
    "exported": "A=(x y)\nexport A=z\n" + T + " --vals ${A[@]}\n",
    "appended": "A=(x y)\nA+=z\n" + T + " --vals ${A[@]}\n",
    "sparse": "A=([3]=abc)\nA=z\n" + T + " --keys ${!A[@]} --vals ${A[@]}\n",
    "associative": "declare -A M=([a]=1)\nM=z\n" + T + " --vals ${M[@]} --keys ${!M[@]}\n",
}


@pytest.mark.parametrize("name", SCALAR_TO_AN_ARRAY)
def test_a_plain_assignment_to_an_array(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`A=z` of an array set the variable A beside the array, whose elements stayed (`x y` where bash has `z y`)."""
    _same_as_bash(SCALAR_TO_AN_ARRAY[name], [], tmp_path, monkeypatch)


def test_keys_past_ascii_are_left_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """bash hashes a key's bytes as C `char`s (hashlib.c hash_string), negative past 127 on x86-64 and not on aarch64,
    so the order of `${M[@]}` with such a key depends on the machine that runs the job: left as written (hash_order
    hashed them unsigned: 45 of 60 random key sets with `é` came out in another order than this x86-64 bash's)."""
    from llmperf_hook.launch.parse import parse_launch
    (tmp_path / "train.sh").write_text("#!/bin/bash\ndeclare -A M=([é]=1 [a]=2)\n" + T + " --vals ${M[@]} ${M[a]}\n")
    monkeypatch.chdir(tmp_path)
    assert parse_launch(["bash", "train.sh"], {}).script_args[-3:] == ("--vals", "${M[@]}", "2")


CONVERSIONS = {  # bash 5.2.15: 'A: cannot convert indexed to associative array'; the declaration fails, A stays
    "declared": "A=(x y)\ndeclare -A A\n" + T + " --vals ${A[@]} --keys ${!A[@]}\n",
    "declared_with_pairs": "A=(x y)\ndeclare -A A=([k]=v)\n" + T + " --vals ${A[@]} --keys ${!A[@]}\n",
    "a_function_s_own": "A=(x y)\nf() { local -A A=([k]=v); B=${A[k]}; }\nf\n" + T + " --vals ${A[@]} --xx $B\n",
}


@pytest.mark.parametrize("name", CONVERSIONS)
def test_an_indexed_array_declared_associative(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`declare -A A` of an indexed A emptied it into an associative array (the launch got nothing for `${A[@]}`)."""
    _same_as_bash(CONVERSIONS[name], [], tmp_path, monkeypatch)
