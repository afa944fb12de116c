# Chart of benchmark 7 (bench/sessions.sh passes dat and out): steady server
# CPU against live locks, simba under sessions, etcd, simba per-lock.
set terminal svg size 800,480
set output out
set termoption noenhanced
set datafile missing "-"
set title "simba benchmark 7: steady server CPU at N live locks"
set logscale x
set xlabel "live locks"
set ylabel "% of one core"
set grid
set key top left
plot dat using 1:2 with linespoints title "simba, sessions", \
     dat using 1:3 with linespoints title "etcd", \
     dat using 1:4 with linespoints title "simba, per-lock leases"
