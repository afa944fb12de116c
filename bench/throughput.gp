# Chart of benchmark 1 (bench/run.sh passes term, out and dat).
eval "set terminal ".term
set output out
set termoption noenhanced
set multiplot layout 1,2 title "simba benchmark 1: throughput, 1,000 mutexes (median ops/s)"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set xtics rotate by -35 nomirror
set grid ytics
set key top left
set ylabel "ops/s"
set yrange [0:*]
set title "acquire + release pairs"
plot dat."-pair.dat" using 2:xtic(1) title "1 client", '' using 3 title "2 clients", '' using 4 title "8 clients"
set title "renewals (ops = leases renewed)"
plot dat."-renew.dat" using 2:xtic(1) title "1 client", '' using 3 title "2 clients", '' using 4 title "8 clients"
unset multiplot
