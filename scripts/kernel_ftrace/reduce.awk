# Reduces a function trace (the `trace` file: TASK-PID [CPU] FLAGS TIMESTAMP: FUNC <-PARENT)
# to one record per (path, context, function): the path is the driver window the event fell
# in (the window's own path on its thread, its `others` path on any other traced thread),
# the context hardirq, softirq or task (the third flag character).
#   awk -v scenario=S -f reduce.awk WINDOWS TRACE
# Windows: repeat own others tid start_ns end_ns ops (crates/kharden-footprint/src/window.rs).
FNR == NR {
    n++
    own[n] = $2; others[n] = $3; tid[n] = $4; start[n] = $5; stop[n] = $6
    next
}
FNR == 1 {
    # Windows are written in the order they closed; sort by start (insertion sort: few).
    for (i = 2; i <= n; i++) {
        j = i
        while (j > 1 && start[j - 1] > start[j]) {
            swap(j - 1, j)
            j--
        }
    }
    k = 1
}
/^#/ { next }
{
    for (i = 2; i <= NF && $i !~ /^\[[0-9]+\]$/; i++) {}
    if (i > NF) next
    task = $1
    for (j = 2; j < i; j++) task = task " " $j
    pid = task
    sub(/.*-/, "", pid)
    flag = substr($(i + 1), 3, 1)
    ctx = (flag == "h" || flag == "H") ? "hardirq" : (flag == "s" ? "softirq" : "task")
    ts = $(i + 2)
    sub(/:$/, "", ts)
    t = ts * 1e9
    fn = $(i + 3)
    # Timestamps are microseconds: a window's edges are widened by one.
    while (k <= n && stop[k] + 1000 < t) k++
    for (w = k; w <= n && start[w] - 1000 <= t; w++) {
        if (t > stop[w] + 1000) continue
        path = (pid == tid[w]) ? own[w] : others[w]
        if (path != "-") calls[path " " ctx " " fn]++
        break
    }
}
END {
    for (key in calls) print "ftrace-fn: " scenario " " key " " calls[key]
}
function swap(a, b,    t) {
    t = own[a]; own[a] = own[b]; own[b] = t
    t = others[a]; others[a] = others[b]; others[b] = t
    t = tid[a]; tid[a] = tid[b]; tid[b] = t
    t = start[a]; start[a] = start[b]; start[b] = t
    t = stop[a]; stop[a] = stop[b]; stop[b] = t
}
