# The seed's original planner (seeds/004 "DP Compact Algorithm", src/awk/compact_dp.awk),
# written again from the seed's description for the benchmark and the tests: it is the
# baseline that `dp-compact plan` with DP_MODEL=seed must agree with and be faster than.
#
# Usage (a POSIX awk: mawk, gawk, busybox awk; run it with LC_ALL=C so that length() counts bytes):
#   LC_ALL=C DP_MIN_KEEP_RATIO=0.12 awk -f bench/seed_planner.awk \
#       -v t=3 -v calls=15 -v c=0 -v total_input=60000 -v ct=100000 CONV_FILE
# prints one line: the number of most recent lines to keep, 0 = do not compact.
#
# Input: the seed agent's CONV_FILE, one JSON message a line; lines are not parsed. The token
# size of a line is ceil(bytes / 4) + 1 (blank lines are lines too). A real user input is a line
# with "role":"user" whose content is not a list ("content":[ marks tool results).
# Settings: the seed's environment variables with its defaults (seeds/004 "环境变量"), and
# MAX_CONTEXT_TOKENS (200000). Stats (agent.sh's stats_get), as -v variables, 0 when unset:
#   t = stats[0] user turns, calls = stats[1] LLM calls, c = stats[2] compactions,
#   total_input = stats[3] input tokens of all calls, ct = stats[7] current context tokens.
# Options (-v), both off by default, neither in the original awk:
#   forced=1     agent.sh's fallback (seeds/004 §7): when no k has a positive benefit and
#                ct > 90 % of M, keep max(3, int(NR * DP_MIN_KEEP_RATIO)) lines.
#   running=1    K by a running sum while k grows (linear time) instead of summing the last k
#                lines again for every k as §7 step 1 says (quadratic time); same decisions.
#   debug=1      the values at the best k (before alignment) on stderr, key=value.
#
# Decision (seeds/004 §4, §7, §8): for k = min_keep..NR, K = tokens of the last k lines,
# H = T - K (skip k when H <= 0), NetBenefit(k) = ① - ② - ③ - ④ + ⑤; the first maximum wins.
# When it is positive the first kept line walks back to the nearest real user input.

function env(name, fallback) {
    return (name in ENVIRON && ENVIRON[name] != "") ? ENVIRON[name] + 0 : fallback
}

{
    tok[NR] = int((length($0) + 3) / 4) + 1
    total += tok[NR]
    user[NR] = (index($0, "\"role\":\"user\"") > 0 && index($0, "\"content\":[") == 0)
}

END {
    if (NR == 0) { print 0; exit }

    p_input = env("DP_P_INPUT", 3.0); p_cache = env("DP_P_CACHE", 0.30); p_out = env("DP_P_OUT", 15.0)
    V = env("DP_V", 5000); S = env("DP_S", 500); dp_l = env("DP_L", 5)
    baseline = env("DP_BASELINE_E", 8); e_fixed = env("DP_E_FIXED", 0)
    r = env("DP_R", 0.8); beta = env("DP_BETA", 0.03); qp = env("DP_QUALITY_PENALTY", 0.2)
    ratio = env("DP_MIN_KEEP_RATIO", 0.25); M = env("MAX_CONTEXT_TOKENS", 200000)
    L_instr = 70
    t += 0; calls += 0; c += 0; total_input += 0; ct += 0

    # E: expected remaining user turns (seeds/004 §3, §6)
    if (e_fixed > 0) E = e_fixed
    else if (baseline > 0) {
        floor_e = (baseline > 1) ? int(baseline / 2) : 2
        E = baseline - t
        if (E < floor_e) E = floor_e
    } else E = 2
    # L: LLM calls per user turn (DP_L, or stats[1] / stats[0] when DP_L = 0), at least 1
    if (dp_l > 0) L = dp_l
    else if (t > 0 && calls > 0) L = calls / t
    else L = 5
    if (L < 1) L = 1
    R = E * L
    avg = (calls > 0 && total_input > 0) ? total_input / calls : 4000
    r_t = r ^ (c + 1)
    if (r_t < 0.37) r_t = 0.37
    info_loss = beta * (1 - r_t) * R * avg * p_input / 1e6

    min_keep = int(NR * ratio + 0.5)
    if (min_keep < 3) min_keep = 3
    if (min_keep > NR) min_keep = NR

    found = 0
    K = 0
    if (running) for (i = NR - min_keep + 2; i <= NR; i++) K += tok[i]
    for (k = min_keep; k <= NR; k++) {
        if (running) K += tok[NR - k + 1]
        else { K = 0; for (i = NR - k + 1; i <= NR; i++) K += tok[i] }
        H = total - K
        if (H <= 0) continue
        t1 = (R - 1) * p_cache * H / 1e6
        t2 = (S + K) * (p_input - p_cache) / 1e6
        t3 = (p_cache * (V + H) + p_input * L_instr + p_out * S) / 1e6
        t5 = qp * p_input * ((V + total) ^ 2 - (V + K) ^ 2) / (M * 1e6)
        benefit = t1 - t2 - t3 - info_loss + t5
        if (!found || benefit > best) {
            found = 1; best = benefit; best_k = k
            b_K = K; b_H = H; b_t1 = t1; b_t2 = t2; b_t3 = t3; b_t5 = t5
        }
    }

    keep = 0
    if (found && best > 0) {
        first = NR - best_k + 1          # the first kept line
        while (first > 1 && !user[first]) first--
        keep = (first > 1) ? NR - first + 1 : 0   # at line 1 nothing is left to drop
    } else if (forced && ct > M * 0.9) {
        keep = int(NR * ratio)
        if (keep < 3) keep = 3
        if (keep >= NR) keep = 0
    }

    if (debug) {
        printf "NR=%d total_tokens=%d E=%.17g L=%.17g R=%.17g avg=%.17g r_t=%.17g info_loss=%.17g min_keep=%d\n", \
            NR, total, E, L, R, avg, r_t, info_loss, min_keep > "/dev/stderr"
        if (found)
            printf "best_k=%d best_benefit=%.17g K=%d H=%d t1_savings=%.17g t2_cache_miss=%.17g t3_compact_cost=%.17g t5_quality_signed=%.17g\n", \
                best_k, best, b_K, b_H, b_t1, b_t2, b_t3, b_t5 > "/dev/stderr"
    }
    print keep
}
