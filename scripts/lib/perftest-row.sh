# shellcheck shell=bash
# The result row of a perftest-format report (Debian's perftest, or iwperf --perftest, which
# prints perftest's header and row formats), judged by its figures, not by its header alone:
# scripts/test-rdma-compat.sh runs it on every perftest client's output.
#
#   perftest_row LOG TEST BYTES ITERS      # TEST: write_bw, ib_read_lat, ... (*_lat: latency)
#
# Passes (returns 0) when LOG holds exactly one table header of TEST's kind and, under it
# (up to the next rule of dashes or header), exactly one row that starts with a number, and
# that row
#   - has the header's columns (bandwidth: 5, latency: 9), each a plain decimal number
#     (perftest prints "-nan" or "inf" for a division by zero: not a figure);
#   - names BYTES octets and ITERS iterations, what was asked for;
#   - bandwidth: a positive message rate, and an average that is the message rate times
#     BYTES (in perftest's units, within 2 %) and positive unless below the printed
#     precision; the peak may be 0.00, which perftest prints where it computed none (e.g. on
#     a send_bw server), or n/a, which iwperf prints for a transfer shorter than its 10 ms
#     window;
#   - latency: positive t_min, t_max, t_typical, t_avg and percentiles, a t_stdev of 0 or
#     more, and t_min <= t_typical, t_avg <= t_max.
# Sets PERFTEST_NOTE to the row (its columns one space apart) or to what was wrong.
# Lines that are neither (perftest's "Conflicting CPU frequency" warnings, iwperf's own
# "iwperf: ..." lines) are passed over.
perftest_default_size() { # perftest_default_size TEST: perftest's (and iwperf's) default -s
    case $1 in
        *atomic*) echo 8 ;;
        *_lat) echo 2 ;;
        *) echo 65536 ;;
    esac
}
# _pt_num I: column I of perftest_row's row is a plain decimal number; _pt_pos I: and above 0.
_pt_num() { [[ ${f[$1]} =~ ^[0-9]+(\.[0-9]+)?$ ]]; }
_pt_pos() { _pt_num "$1" && [[ ${f[$1]} =~ [1-9] ]]; }
# shellcheck disable=SC2034 # PERFTEST_NOTE is for the caller
perftest_row() {
    local log=$1 test=$2 bytes=$3 iters=$4 hdr cols kind
    case $test in
        *_lat) kind=latency hdr='^ *#bytes +#iterations +t_min.usec. ' cols=9 ;;
        *) kind=bandwidth hdr='^ *#bytes +#iterations +BW peak.(MB|Gb)/sec. ' cols=5 ;;
    esac
    PERFTEST_NOTE=""
    if [[ ! -r $log ]]; then
        PERFTEST_NOTE="$test: no output ($log not found)"
        return 1
    fi
    local headers rows
    headers=$(grep -cE "$hdr" "$log" || true)
    if [[ $headers != 1 ]]; then
        PERFTEST_NOTE="$test: $headers $kind table header(s), wanted 1"
        return 1
    fi
    rows=$(awk -v hdr="$hdr" '
        $0 ~ hdr { inside = 1; next }
        inside && (/^ *---/ || /#bytes/) { inside = 0 }
        inside && $1 ~ /^[0-9]+$/ { print }
    ' "$log")
    if [[ -z $rows ]]; then
        PERFTEST_NOTE="$test: no result row under the $kind header"
        return 1
    fi
    if [[ $(wc -l <<<"$rows") != 1 ]]; then
        PERFTEST_NOTE="$test: $(wc -l <<<"$rows") result rows, wanted 1: $(tr -s ' \t\n' ' ' <<<"$rows")"
        return 1
    fi
    local f row
    read -ra f <<<"$rows"
    row="${f[*]}"
    if [[ ${#f[@]} != "$cols" ]]; then
        PERFTEST_NOTE="$test: ${#f[@]} columns, wanted $cols: $row"
        return 1
    fi
    if [[ ${f[0]} != "$bytes" || ${f[1]} != "$iters" ]]; then
        PERFTEST_NOTE="$test: ${f[0]} octets x ${f[1]} iterations, asked for $bytes x $iters: $row"
        return 1
    fi
    local i
    if [[ $kind == bandwidth ]]; then
        if ! { _pt_num 2 || [[ ${f[2]} == n/a ]]; }; then
            PERFTEST_NOTE="$test: BW peak '${f[2]}' is no figure: $row"
            return 1
        fi
        if ! _pt_pos 4; then
            PERFTEST_NOTE="$test: MsgRate '${f[4]}' is no positive figure: $row"
            return 1
        fi
        # The average is the message rate times the size, in perftest's units (MB = 2^20
        # octets, Gb = 1.25e8 octets): within 2 % and the last printed digit. Only an
        # average below the printed precision (0.00, tiny atomic_bw figures) may be 0.
        local unit=1048576
        grep -qE "${hdr/(MB|Gb)/Gb}" "$log" && unit=125000000
        if ! _pt_num 3 || ! awk -v b="$bytes" -v r="${f[4]}" -v a="${f[3]}" -v u="$unit" 'BEGIN {
                want = b * r * 1000000 / u; d = a - want; if (d < 0) d = -d
                exit !(d <= 0.005 + want * 0.02 && (a > 0 || want < 0.005))
            }'; then
            PERFTEST_NOTE="$test: BW average '${f[3]}' is no positive figure matching $bytes octets at ${f[4]} Mpps: $row"
            return 1
        fi
    else
        local names=("" "" t_min t_max t_typical t_avg t_stdev 99% 99.9%)
        for i in 2 3 4 5 7 8; do
            if ! _pt_pos "$i"; then
                PERFTEST_NOTE="$test: ${names[$i]} '${f[$i]}' is no positive figure: $row"
                return 1
            fi
        done
        if ! _pt_num 6; then
            PERFTEST_NOTE="$test: t_stdev '${f[6]}' is no figure: $row"
            return 1
        fi
        if ! awk -v a="${f[2]}" -v b="${f[3]}" -v t="${f[4]}" -v m="${f[5]}" \
            'BEGIN { exit !(a + 0 <= t + 0 && t + 0 <= b + 0 && a + 0 <= m + 0 && m + 0 <= b + 0) }'; then
            PERFTEST_NOTE="$test: t_min <= t_typical, t_avg <= t_max does not hold: $row"
            return 1
        fi
    fi
    PERFTEST_NOTE=$row
}

# perftest_clock_failed LOG...: perftest failed in its clock calibration, not in its test:
# some LOG holds "Correlation coefficient r^2: R < 0.9". Before it reports, perftest times
# 200 gettimeofday loops against the cycle counter (get_cpu_mhz in its get_clock.c) and
# gives up ("Can't produce a report", exit 1) when the fit is poor, which one preemption of
# a busy vCPU makes it; the test itself had run. Its callers run such a pair again, at most
# twice (scripts/test-rdma-compat.sh's pair, bench/rdma-compat.sh's run), as
# scripts/interop-siw.sh's guest does.
perftest_clock_failed() {
    grep -qsE '^Correlation coefficient r\^2: .* < 0\.9' "$@"
}
