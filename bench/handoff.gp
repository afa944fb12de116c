# Chart of benchmark 2 (bench/run.sh passes term, out and dat): latency CDFs.
eval "set terminal ".term
set output out
set title "simba benchmark 2: handoff latency, release -> next holder in another process"
set logscale x 10
set format x "10^{%L}"
set xlabel "latency (ms, log scale)"
set ylabel "fraction of handoffs"
set yrange [0:1]
set grid
set key center center
plot dat using 2:1 with lines lw 2 title "push: client library (LISTEN/NOTIFY)", \
     dat using 3:1 with lines lw 2 title "polling only (Simba JDBC model)"
