# help2roff.awk: turns one clap `--help` text into a roff fragment (used by scripts/gen-man.sh).
#
# Variables (-v): prog (rzfs), subcmd (list; empty for a whole program), mode ("sub": one
# subcommand as an .SS block of the COMMANDS section; "page": a program without subcommands,
# as SYNOPSIS, DESCRIPTION, ARGUMENTS and OPTIONS; "head": NAME and SYNOPSIS of a program
# with subcommands), gloss (a file of "PROG SUB FLAG<TAB>text" lines giving the meaning of
# options whose help text is empty), intro (a roff file inserted into DESCRIPTION).
#
# The help text: about paragraphs, "Usage: ...", then sections ("Arguments:", "Options:",
# "Commands:") whose items start with two spaces; the description follows the item on the
# same line after two or more spaces, or (clap's long form) on lines indented further.

function esc(s,    out) {
    gsub(/\\/, "\\e", s)
    gsub(/-/, "\\-", s)
    # `code` in help texts: bold.
    out = ""
    while (match(s, /`[^`]*`/)) {
        out = out substr(s, 1, RSTART - 1) "\\fB" substr(s, RSTART + 1, RLENGTH - 2) "\\fR"
        s = substr(s, RSTART + RLENGTH)
    }
    return out s
}

# A line of text as roff: a leading dot or quote would be read as a request.
function line(s) {
    if (s ~ /^[.']/) s = "\\&" s
    print s
}

# "-o <PROPS>", "-L, --large-block", "[NAMES]...", "-d..." in bold and italics.
function fmtspec(s,    n, i, t, parts, out, pre, post) {
    n = split(s, parts, " ")
    out = ""
    for (i = 1; i <= n; i++) {
        t = parts[i]
        pre = ""; post = ""
        if (t ~ /,$/) { post = ","; t = substr(t, 1, length(t) - 1) }
        if (t ~ /\.\.\.$/) { post = "..." post; t = substr(t, 1, length(t) - 3) }
        if (t ~ /^\[.*\]$/) { pre = "["; post = "]" post; t = substr(t, 2, length(t) - 2) }
        if (t ~ /^<.*>$/) {
            t = "\\fI" esc(substr(t, 2, length(t) - 2)) "\\fR"
        } else if (t ~ /^[A-Z][A-Z_]*$/) {
            t = "\\fI" t "\\fR"
        } else if (t ~ /^-/) {
            t = "\\fB" esc(t) "\\fR"
        } else {
            t = esc(t)
        }
        out = out (i > 1 ? " " : "") pre t post
    }
    return out
}

# A usage line ("rzfs list [OPTIONS] [NAMES]...") with the command in bold.
function fmtusage(u,    n, i, parts, out, t, words) {
    words = (sub_ == "" ? 1 : 2)
    n = split(u, parts, " ")
    out = ""
    for (i = 1; i <= n; i++) {
        t = parts[i]
        if (i <= words) t = "\\fB" esc(t) "\\fR"
        else t = fmtspec(t)
        out = out (i > 1 ? " " : "") t
    }
    return out
}

function additem(sect, spec, desc) {
    nitems++
    isect[nitems] = sect
    ispec[nitems] = spec
    idesc[nitems] = desc
}

function firstflag(spec,    t) {
    t = spec
    sub(/[ ,].*/, "", t)
    sub(/\.\.\.$/, "", t)
    return t
}

BEGIN {
    sub_ = subcmd
    if (gloss != "") {
        while ((getline g < gloss) > 0) {
            if (g ~ /^#/ || g !~ /\t/) continue
            k = substr(g, 1, index(g, "\t") - 1)
            glossary[k] = substr(g, index(g, "\t") + 1)
        }
        close(gloss)
    }
    state = "about"; npara = 0; nitems = 0; para = ""; nafter = 0
}

{
    sub(/[ \t]+$/, "")
}

state == "about" && /^Usage: / {
    if (para != "") { about[++npara] = para; para = "" }
    usage = substr($0, 8)
    state = "body"
    next
}

state == "about" {
    if ($0 == "") {
        if (para != "") { about[++npara] = para; para = "" }
    } else {
        para = (para == "" ? $0 : para " " $0)
    }
    next
}

/^[A-Z][A-Za-z ]*:$/ {
    section = substr($0, 1, length($0) - 1)
    next
}

$0 == "" { next }

# An item: two spaces, or six before a long option that has no short one.
/^  [^ ]/ || /^      -/ {
    s = $0
    sub(/^ +/, "", s)
    if (match(s, /[^ ]  +[^ ]/)) {
        spec = substr(s, 1, RSTART)
        desc = substr(s, RSTART + RLENGTH - 1)
    } else {
        spec = s
        desc = ""
    }
    additem(section, spec, desc)
    next
}

# Its description in clap's long form: indented ten spaces.
/^          / {
    if (nitems > 0) {
        s = $0
        sub(/^ +/, "", s)
        idesc[nitems] = (idesc[nitems] == "" ? s : idesc[nitems] " " s)
    }
    next
}

{ after[++nafter] = $0 }

END {
    if (mode == "head") {
        print ".SH NAME"
        line(prog " \\- " esc(about[1]))
        print ".SH SYNOPSIS"
        print ".B " prog
        print ".I command"
        print ".RI [ options ]"
        print ".RI [ arguments ...]"
        print ".PP"
        print ".B " prog
        print ".B help"
        print ".RI [ command ]"
        exit
    }
    if (mode == "page") {
        print ".SH NAME"
        line(prog " \\- " esc(about[1]))
        print ".SH SYNOPSIS"
        line(fmtusage(usage))
        print ".SH DESCRIPTION"
        if (intro != "") {
            while ((getline g < intro) > 0) print g
            close(intro)
            print ".PP"
        }
        # The first paragraph is the NAME line already.
        for (i = 2; i <= npara; i++) {
            print ".PP"
            line(esc(about[i]) (about[i] ~ /[.!?]$/ ? "" : "."))
        }
    } else {
        print ".SS \"" prog " " sub_ "\""
        for (i = 1; i <= npara; i++) {
            if (i > 1) print ".PP"
            line(esc(about[i]) (about[i] ~ /[.!?]$/ ? "" : "."))
        }
        print ".PP"
        print ".RS"
        line(fmtusage(usage))
        print ".RE"
    }
    last = ""
    for (i = 1; i <= nitems; i++) {
        if (isect[i] == "Commands") continue
        d = idesc[i]
        f = firstflag(ispec[i])
        if (f == "-h" || f == "--help") {
            if (mode != "page") continue
        }
        if (d == "") {
            key = prog " " (sub_ == "" ? "" : sub_ " ") f
            if (key in glossary) d = glossary[key]
        }
        # Positional arguments without a help text are named in the usage line already.
        if (d == "" && isect[i] == "Arguments") continue
        if (isect[i] != last) {
            if (mode == "page") print ".SH " toupper(isect[i])
            else print ".PP"
            last = isect[i]
        }
        print ".TP"
        line(fmtspec(ispec[i]))
        if (d != "") line(esc(d) (d ~ /[.!?\]]$/ ? "" : "."))
    }
    if (nafter > 0) {
        print ".PP"
        for (i = 1; i <= nafter; i++) line(esc(after[i]))
    }
}
