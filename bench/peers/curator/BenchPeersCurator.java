// Benchmark 10's driver for ZooKeeper 3.8 with Curator 5.4 (bench/peers.sh
// runs it beside simba's, etcd's and Redis's drivers, which speak the same
// command line and print the same lines). Built offline against Debian's
// jars (their manifests' Class-Path brings in ZooKeeper, jute, Guava, slf4j):
//
//   cp=/usr/share/java/curator-recipes.jar:/usr/share/java/slf4j-simple.jar
//   javac -d build/curator -cp $cp bench/peers/curator/BenchPeersCurator.java
//   java -cp build/curator:$cp BenchPeersCurator MODE --endpoint 127.0.0.1:PORT [--lease-s 5] [options]
//
//   MODE: cycles --clients N --locks L --seconds S [--warmup-s 1]
//         handoff --handoffs K
//         leader --name NAME
//         hold --locks L
//
// Every client is a CuratorFramework of its own (one ZooKeeper connection and
// session, session timeout --lease-s); locks are InterProcessMutex, the
// leader a LeaderLatch. leader and hold run until SIGTERM or stdin's end.
import java.io.IOException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.leader.LeaderLatchListener;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.state.ConnectionState;
import org.apache.curator.retry.ExponentialBackoffRetry;

public final class BenchPeersCurator {
    static String mode, endpoint, name = "bench";
    static int leaseS = 5, clients = 1, locks = 1, handoffs = 200;
    static double seconds = 5, warmupS = 1;

    // ------------------------------------------------------------- clients

    /** One client: its own connection and session, connected. */
    static CuratorFramework open() throws Exception {
        CuratorFramework c = CuratorFrameworkFactory.builder()
                .connectString(endpoint)
                .sessionTimeoutMs(leaseS * 1000)
                .connectionTimeoutMs(5000)
                .retryPolicy(new ExponentialBackoffRetry(100, 10))
                .build();
        c.start();
        if (!c.blockUntilConnected(30, TimeUnit.SECONDS)) fatal("no connection to " + endpoint + " in 30 s");
        // The server clamps the timeout to [2, 20] x tickTime: the lease must be the one asked.
        int negotiated = c.getZookeeperClient().getZooKeeper().getSessionTimeout();
        if (negotiated != leaseS * 1000) fatal("session timeout " + negotiated + " ms, not the " + leaseS + " s asked");
        return c;
    }

    // --------------------------------------------------------------- modes

    static void cycles() throws Exception {
        CuratorFramework[] cl = new CuratorFramework[clients];
        InterProcessMutex[] m = new InterProcessMutex[clients];
        for (int i = 0; i < clients; i++) {
            cl[i] = open();
            m[i] = new InterProcessMutex(cl[i], "/bench/lock/" + (i % locks));
        }
        // All clients start together, once every session is up.
        final long start = System.nanoTime() + 100_000_000L;
        final long counted = start + (long) (warmupS * 1e9);
        final long end = counted + (long) (seconds * 1e9);
        final Samples[] samples = new Samples[clients];
        Thread[] threads = new Thread[clients];
        for (int i = 0; i < clients; i++) {
            final int me = i;
            samples[i] = new Samples();
            threads[i] = new Thread(() -> {
                try {
                    sleepUntil(start);
                    for (long t0 = System.nanoTime(); t0 < end; t0 = System.nanoTime()) {
                        m[me].acquire();
                        m[me].release();
                        if (t0 >= counted) samples[me].add((System.nanoTime() - t0) / 1e3);
                    }
                } catch (Exception e) {
                    fatal(e);
                }
            });
            threads[i].start();
        }
        for (Thread t : threads) t.join();
        Samples all = new Samples();
        for (Samples s : samples) all.addAll(s);
        if (all.n == 0) fatal("no cycle completed in " + seconds + " s");
        for (CuratorFramework c : cl) c.close();
        double measured = (end - counted) / 1e9;
        all.sort();
        print(String.format(Locale.ROOT,
                "{\"mode\":\"cycles\",\"clients\":%d,\"locks\":%d,\"seconds\":%s,\"cycles\":%d,"
                        + "\"cycles_per_s\":%s,\"p50_us\":%s,\"p99_us\":%s}",
                clients, locks, num(measured), all.n, num(all.n / measured), num(all.rank(50)), num(all.rank(99))));
    }

    // Two clients pass one lock back and forth, each on a thread of its own
    // (an InterProcessMutex is released by the thread that acquired it): the
    // holder waits 20 ms (the other is parked in acquire), stamps t0 and
    // releases; the other stamps t1 as its acquire returns. As bench_peers's.
    static final Object mu = new Object();
    static int took = -1;  // handoffs done; -1 until the first holder has the lock
    static long t0;

    static void handoff() throws Exception {
        CuratorFramework[] cl = {open(), open()};
        InterProcessMutex[] m = {new InterProcessMutex(cl[0], "/bench/handoff"),
                new InterProcessMutex(cl[1], "/bench/handoff")};
        Samples samples = new Samples();
        Thread[] th = new Thread[2];
        for (int i = 0; i < 2; i++) {
            final int me = i;
            th[i] = new Thread(() -> {
                try {
                    synchronized (mu) {
                        while (me != 0 && took < 0) mu.wait();
                    }
                    for (;;) {
                        m[me].acquire();
                        long t1 = System.nanoTime();
                        int mine;
                        synchronized (mu) {
                            if (took >= 0) samples.add((t1 - t0) / 1e3);
                            mine = ++took;
                            mu.notifyAll();
                        }
                        if (mine >= handoffs) {  // the last one: done
                            m[me].release();
                            return;
                        }
                        Thread.sleep(20);
                        synchronized (mu) {
                            t0 = System.nanoTime();
                        }
                        m[me].release();
                        synchronized (mu) {
                            while (took <= mine) mu.wait();
                            if (took >= handoffs) return;
                        }
                    }
                } catch (Exception e) {
                    fatal(e);
                }
            });
            th[i].start();
        }
        for (Thread t : th) t.join();
        cl[0].close();
        cl[1].close();
        samples.sort();
        print(String.format(Locale.ROOT, "{\"mode\":\"handoff\",\"handoffs\":%d,\"p50_us\":%s,\"p99_us\":%s,\"max_us\":%s}",
                samples.n, num(samples.rank(50)), num(samples.rank(99)), num(samples.rank(100))));
    }

    static void leader() throws Exception {
        BlockingQueue<String> events = stopped();
        CuratorFramework cl = open();
        cl.getConnectionStateListenable().addListener((c, s) -> {
            if (s == ConnectionState.LOST) events.add("lost");
        });
        // The session is unique to this campaigner, so it makes a unique id.
        String id = ProcessHandle.current().pid() + "-"
                + Long.toHexString(cl.getZookeeperClient().getZooKeeper().getSessionId());
        LeaderLatch latch = new LeaderLatch(cl, "/bench/election/" + name, id);
        latch.addListener(new LeaderLatchListener() {
            @Override
            public void isLeader() {
                events.add("elected");
            }

            @Override
            public void notLeader() {
            }
        });
        latch.start();
        // "ready" only once our node is in the election (start creates it in
        // the background), so the harness never kills the leader before we queue.
        while (latch.getOurPath() == null && events.isEmpty()) Thread.sleep(2);
        print("ready");
        String e = events.take();
        if (e.equals("elected")) {
            print("elected");
            e = events.take();
        }
        if (e.equals("lost")) fatal("session lost while " + (latch.hasLeadership() ? "leading" : "campaigning"));
        // Clean stop: close deletes our node (the next one's watch fires),
        // closing the client ends the session.
        latch.close();
        cl.close();
        done.countDown();
    }

    static void hold() throws Exception {
        BlockingQueue<String> events = stopped();
        CuratorFramework cl = open();
        cl.getConnectionStateListenable().addListener((c, s) -> {
            if (s == ConnectionState.LOST) events.add("lost");
        });
        InterProcessMutex[] held = new InterProcessMutex[locks];
        long t = System.nanoTime();
        for (int i = 0; i < locks; i++) {
            held[i] = new InterProcessMutex(cl, "/bench/hold/" + i);
            held[i].acquire();
        }
        print(String.format(Locale.ROOT, "{\"mode\":\"hold\",\"locks\":%d,\"take_s\":%s}", locks,
                num((System.nanoTime() - t) / 1e9)));
        if (events.take().equals("lost")) fatal("session lost while holding");
        t = System.nanoTime();
        for (InterProcessMutex m : held) m.release();
        double release = (System.nanoTime() - t) / 1e9;
        // Untimed: delete the locks' empty parents (containers) in one pipelined
        // burst, or the server reaps them 10,000 a minute while the other
        // stores are measured; each round then takes fresh locks.
        CountDownLatch gone = new CountDownLatch(locks);
        for (int i = 0; i < locks; i++)
            cl.delete().inBackground((c, e) -> gone.countDown()).forPath("/bench/hold/" + i);
        if (!gone.await(60, TimeUnit.SECONDS)) fatal("the locks' parents not deleted in 60 s");
        cl.close();
        print(String.format(Locale.ROOT, "{\"mode\":\"released\",\"locks\":%d,\"release_s\":%s}", locks, num(release)));
        done.countDown();
    }

    // Set once leader or hold has cleaned up: a SIGTERM's shutdown hook waits
    // for it, so the clean stop runs to its end before the JVM halts.
    static final CountDownLatch done = new CountDownLatch(1);

    /** A queue that gets "stop" on SIGTERM (or SIGINT) or at stdin's end. */
    static BlockingQueue<String> stopped() {
        BlockingQueue<String> q = new LinkedBlockingQueue<>();
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            q.add("stop");
            try {
                done.await(2L * leaseS, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }));
        Thread stdin = new Thread(() -> {
            byte[] buf = new byte[256];
            try {
                while (System.in.read(buf) >= 0) {
                }
            } catch (IOException e) {
                // as the end
            }
            q.add("stop");
        });
        stdin.setDaemon(true);
        stdin.start();
        return q;
    }

    // ------------------------------------------------------------- helpers

    /** Latencies in microseconds, unboxed. */
    static final class Samples {
        double[] v = new double[1024];
        int n;

        void add(double x) {
            if (n == v.length) v = Arrays.copyOf(v, 2 * n);
            v[n++] = x;
        }

        void addAll(Samples o) {
            for (int i = 0; i < o.n; i++) add(o.v[i]);
        }

        void sort() {
            Arrays.sort(v, 0, n);
        }

        /** Nearest rank of sorted, non-empty samples. */
        double rank(double p) {
            int r = (int) Math.ceil(p / 100 * n);
            return v[Math.max(r, 1) - 1];
        }
    }

    static void sleepUntil(long nanos) throws InterruptedException {
        for (long d; (d = nanos - System.nanoTime()) > 0; ) Thread.sleep(d / 1_000_000, (int) (d % 1_000_000));
    }

    static String num(double x) {
        return Double.toString(x);
    }

    static synchronized void print(String line) {
        System.out.println(line);
        System.out.flush();
    }

    static void fatal(Object why) {
        if (why instanceof Throwable) ((Throwable) why).printStackTrace();
        System.err.println("bench_peers_curator: " + why);
        System.err.flush();
        Runtime.getRuntime().halt(1);  // not exit: that would wait on the shutdown hook
    }

    static void usage(String why) {
        System.err.println(why);
        System.err.println("usage: BenchPeersCurator cycles|handoff|leader|hold --endpoint HOST:PORT [--lease-s 5]\n"
                + "  [--clients 1] [--locks 1] [--seconds 5] [--warmup-s 1] [--handoffs 200] [--name bench]");
        System.exit(2);
    }

    static void parse(String[] argv) {
        if (argv.length < 1) usage("no mode");
        mode = argv[0];
        if (!List.of("cycles", "handoff", "leader", "hold").contains(mode)) usage("unknown mode \"" + mode + "\"");
        List<String> rest = new ArrayList<>(Arrays.asList(argv).subList(1, argv.length));
        try {
            while (!rest.isEmpty()) {
                String opt = rest.remove(0);
                if (rest.isEmpty()) usage("no value for " + opt);
                String v = rest.remove(0);
                switch (opt) {
                    case "--endpoint": endpoint = v; break;
                    case "--lease-s": leaseS = Integer.parseInt(v); break;
                    case "--clients": clients = Integer.parseInt(v); break;
                    case "--locks": locks = Integer.parseInt(v); break;
                    case "--seconds": seconds = Double.parseDouble(v); break;
                    case "--warmup-s": warmupS = Double.parseDouble(v); break;
                    case "--handoffs": handoffs = Integer.parseInt(v); break;
                    case "--name": name = v; break;
                    default: usage("unknown option " + opt);
                }
            }
        } catch (NumberFormatException e) {
            usage("not a number: " + e.getMessage());
        }
        if (endpoint == null) usage("--endpoint is required");
        if (leaseS < 1 || clients < 1 || locks < 1 || handoffs < 1)
            usage("--lease-s, --clients, --locks and --handoffs must be at least 1");
        if (!(seconds > 0) || !(warmupS >= 0)) usage("--seconds must be positive, --warmup-s not negative");
    }

    public static void main(String[] argv) throws Exception {
        // slf4j-simple: only warnings and errors, on stderr.
        if (System.getProperty("org.slf4j.simpleLogger.defaultLogLevel") == null)
            System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
        // ZooKeeper 3.8 warns of the server's closed socket at every close.
        if (System.getProperty("org.slf4j.simpleLogger.log.org.apache.zookeeper.ClientCnxn") == null)
            System.setProperty("org.slf4j.simpleLogger.log.org.apache.zookeeper.ClientCnxn", "error");
        parse(argv);
        switch (mode) {
            case "cycles": cycles(); break;
            case "handoff": handoff(); break;
            case "leader": leader(); break;
            default: hold(); break;
        }
        System.exit(0);  // whatever threads the clients left behind
    }
}
