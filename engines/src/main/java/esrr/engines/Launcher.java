package esrr.engines;

import java.io.IOException;
import java.io.InputStream;
import java.lang.reflect.Constructor;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.FileVisitResult;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.SimpleFileVisitor;
import java.nio.file.attribute.BasicFileAttributes;
import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.function.Supplier;

/**
 * Starts an Elasticsearch or OpenSearch cluster in this JVM, from the jars on the class path: one node, or
 * {@code --nodes N} (node 1 elects itself master, the others find it on its transport port; their log lines
 * carry node 1's id, as log4j's node-id converter is one per JVM, and node 2 logs a harmless
 * {@code AlreadySetException} about it).
 *
 * <p>As both projects' test frameworks do (Elasticsearch's {@code MockNode}, OpenSearch's {@code MockNode}):
 * a {@code Node} built with its protected constructor, the HTTP module ({@code transport-netty4-client})
 * and the pattern analysis components (see {@code ANALYSIS_PLUGINS}) passed as class-path plugins,
 * {@code discovery.type: single-node}, {@code path.home} a fresh temporary folder. HTTP and transport listen
 * on 127.0.0.1 only, on ports the system picks unless {@code --http-port} names one. The two engines differ
 * only in their package names, so the node is built by reflection and one class serves both (and compiles
 * without their jars).
 *
 * <p>Prints {@code ESRR-ENGINE READY <engine> <version> http://127.0.0.1:<port> <home folder>} on standard
 * output once the node answers; stops the node and deletes its folder on SIGTERM/SIGINT, or when standard input
 * closes if {@code --stop-on-stdin-eof} is given (so a test session that dies takes its node with it).
 *
 * <pre>
 * java -cp 'target/elasticsearch-7.17.28/lib/*:target/classes' esrr.engines.Launcher elasticsearch \
 *     [--http-port N] [--data DIR] [--nodes N] [--stop-on-stdin-eof] [--setting key=value ...]
 * </pre>
 */
public final class Launcher {
    public static final String READY = "ESRR-ENGINE READY";

    private static final Map<String, String> PACKAGES = Map.of(
            "elasticsearch", "org.elasticsearch", "opensearch", "org.opensearch");
    // OpenSearch 3.x renamed the plugin class; 2.x and Elasticsearch keep the old name.
    private static final List<String> NETTY_PLUGINS = List.of(
            "transport.Netty4ModulePlugin", "transport.Netty4Plugin");
    // The analysis components esrr's index uses (the pattern tokenizer, pattern_replace): OpenSearch's own
    // analysis-common module; for Elasticsearch, which does not publish that module, PatternAnalysisPlugin
    // (engines/src/elasticsearch). Each engine loads the first of its names that is on the class path.
    private static final Map<String, List<String>> ANALYSIS_PLUGINS = Map.of(
            "elasticsearch", List.of("esrr.engines.PatternAnalysisPlugin"),
            "opensearch", List.of("org.opensearch.analysis.common.CommonAnalysisModulePlugin",
                    "org.opensearch.analysis.common.CommonAnalysisPlugin"));

    private Launcher() {
    }

    public static void main(String[] args) throws Exception {
        if (args.length == 0 || !PACKAGES.containsKey(args[0])) {
            usage("the first argument names the engine: elasticsearch or opensearch");
        }
        String engine = args[0];
        String pkg = PACKAGES.get(engine);
        String httpPort = "0";
        String dataDir = null;
        int nodes = 1;
        boolean stopOnStdinEof = false;
        Map<String, String> extra = new LinkedHashMap<>();
        for (int i = 1; i < args.length; i++) {
            switch (args[i]) {
                case "--http-port" -> httpPort = value(args, ++i);
                case "--data" -> dataDir = value(args, ++i);
                case "--nodes" -> nodes = Integer.parseInt(value(args, ++i));
                case "--stop-on-stdin-eof" -> stopOnStdinEof = true;
                case "--setting" -> {
                    String pair = value(args, ++i);
                    int eq = pair.indexOf('=');
                    if (eq <= 0) {
                        usage("--setting takes key=value, got " + pair);
                    }
                    extra.put(pair.substring(0, eq), pair.substring(eq + 1));
                }
                default -> usage("unknown argument " + args[i]);
            }
        }
        // Netty otherwise fails when a second component sets the processor count (both engines' start scripts set it).
        System.setProperty("es.set.netty.runtime.available.processors", "false");
        System.setProperty("opensearch.set.netty.runtime.available.processors", "false");

        if (nodes < 1) {
            usage("--nodes takes 1 or more");
        }
        Path home = Files.createTempDirectory("esrr-" + engine + "-");
        Path data = dataDir != null ? Path.of(dataDir) : home.resolve("data");
        Reflected engineClasses = new Reflected(pkg, ANALYSIS_PLUGINS.get(engine));
        List<Object> started = new CopyOnWriteArrayList<>();
        CountDownLatch stopped = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            for (int i = started.size() - 1; i >= 0; i--) {
                engineClasses.close(started.get(i));
            }
            deleteTree(home);
            stopped.countDown();
        }, "esrr-engine-stop"));
        int firstHttpPort;
        try {
            String seed = null;
            for (int n = 1; n <= nodes; n++) {
                Map<String, String> settings = nodeSettings(home, nodes == 1 ? data : data.resolve("node-" + n),
                        nodes == 1 ? "esrr-node" : "esrr-node-" + n, n == 1 ? httpPort : "0");
                if (nodes > 1) {  // node 1 elects itself master; the others find it on its transport port
                    settings.remove("discovery.type");
                    settings.put("cluster.initial_master_nodes", "esrr-node-1");
                    if (seed != null) {
                        settings.put("discovery.seed_hosts", seed);
                    }
                }
                settings.putAll(extra);
                Object node = engineClasses.start(settings);
                started.add(node);
                if (n == 1) {
                    seed = "127.0.0.1:" + engineClasses.transportPort(node);
                }
            }
            firstHttpPort = engineClasses.httpPort(started.get(0));
            if (nodes > 1) {
                awaitNodes(firstHttpPort, nodes);
            }
        } catch (Exception | Error e) {
            e.printStackTrace();
            System.exit(1);  // the hook closes the nodes that started and deletes the folder
            throw e;
        }
        System.out.println(READY + " " + engine + " " + engineClasses.version() + " http://127.0.0.1:" + firstHttpPort
                + " " + home);
        System.out.flush();
        if (stopOnStdinEof) {
            InputStream in = System.in;
            while (in.read() != -1) {
                // anything written is ignored; only the end of the stream counts
            }
            System.exit(0);
        }
        stopped.await();
    }

    /** One node's settings: loopback only, its own data folder, single-node discovery unless a cluster is asked. */
    private static Map<String, String> nodeSettings(Path home, Path data, String name, String httpPort) {
        Map<String, String> settings = new LinkedHashMap<>();
        settings.put("cluster.name", "esrr-test");
        settings.put("node.name", name);
        settings.put("path.home", home.toString());
        // --data: a folder kept when the node stops, so that a node started again on it finds its indices.
        settings.put("path.data", data.toString());
        settings.put("path.logs", home.resolve("logs").toString());
        settings.put("network.host", "127.0.0.1");
        settings.put("http.port", httpPort);
        settings.put("transport.port", "0");
        settings.put("discovery.type", "single-node");
        // A shared disk that is 90 % full must not make the test indices read-only.
        settings.put("cluster.routing.allocation.disk.threshold_enabled", "false");
        settings.put("logger.level", "WARN");
        return settings;
    }

    /** Wait (60 s at most) until the cluster behind {@code port} has {@code nodes} nodes. */
    private static void awaitNodes(int port, int nodes) throws Exception {
        HttpClient client = HttpClient.newHttpClient();
        URI health = URI.create("http://127.0.0.1:" + port + "/_cluster/health?wait_for_nodes=" + nodes
                + "&timeout=60s");
        HttpResponse<String> answer = client.send(HttpRequest.newBuilder(health).build(),
                HttpResponse.BodyHandlers.ofString());
        if (answer.statusCode() != 200 || answer.body().contains("\"timed_out\":true")) {
            throw new IllegalStateException("the cluster did not reach " + nodes + " nodes: " + answer.body());
        }
    }

    /** The engine's classes, found by package name. */
    private static final class Reflected {
        private final String pkg;
        private final List<String> analysisPlugins;
        private final Class<?> settingsClass;
        private boolean loggingConfigured;

        Reflected(String pkg, List<String> analysisPlugins) throws ClassNotFoundException {
            this.pkg = pkg;
            this.analysisPlugins = analysisPlugins;
            this.settingsClass = Class.forName(pkg + ".common.settings.Settings");
        }

        Object start(Map<String, String> values) throws Exception {
            Object builder = settingsClass.getMethod("builder").invoke(null);
            Method put = builder.getClass().getMethod("put", String.class, String.class);
            for (Map.Entry<String, String> entry : values.entrySet()) {
                put.invoke(builder, entry.getKey(), entry.getValue());
            }
            Object settings = builder.getClass().getMethod("build").invoke(builder);
            if (!loggingConfigured) {  // once per JVM, for the first node
                Class.forName(pkg + ".common.logging.LogConfigurator")
                        .getMethod("configureWithoutConfig", settingsClass).invoke(null, settings);
                loggingConfigured = true;
            }
            Supplier<String> nodeName = () -> values.get("node.name");
            Object environment = Class.forName(pkg + ".node.InternalSettingsPreparer")
                    .getMethod("prepareEnvironment", settingsClass, Map.class, Path.class, Supplier.class)
                    .invoke(null, settings, Map.of(), null, nodeName);
            Class<?> nodeClass = Class.forName(pkg + ".node.Node");
            Constructor<?> constructor = nodeClass.getDeclaredConstructor(
                    Class.forName(pkg + ".env.Environment"), Collection.class, boolean.class);
            constructor.setAccessible(true);
            Collection<Class<?>> plugins = new ArrayList<>();
            plugins.add(firstPresent(NETTY_PLUGINS.stream().map(name -> pkg + "." + name).toList(),
                    "is transport-netty4-client on the class path?"));
            plugins.add(firstPresent(analysisPlugins, "is engines/target/<engine>-<version>/classes or "
                    + "OpenSearch's analysis-common on the class path?"));
            try {
                Object node = constructor.newInstance(environment, pluginArgument(constructor, plugins), true);
                return nodeClass.getMethod("start").invoke(node);
            } catch (InvocationTargetException e) {
                throw e.getCause() instanceof Exception cause ? cause : e;
            }
        }

        /** The plugins as the constructor takes them: classes, or (OpenSearch 3.x) a {@code PluginInfo} each. */
        Collection<?> pluginArgument(Constructor<?> constructor, Collection<Class<?>> plugins) throws Exception {
            if (!constructor.getGenericParameterTypes()[1].getTypeName().contains("PluginInfo")) {
                return plugins;
            }
            Class<?> info = Class.forName(pkg + ".plugins.PluginInfo");
            Class<?> versionClass = Class.forName(pkg + ".Version");
            Constructor<?> describe = info.getConstructor(String.class, String.class, String.class, versionClass,
                    String.class, String.class, List.class, boolean.class);
            Object current = versionClass.getField("CURRENT").get(null);
            List<Object> infos = new ArrayList<>();
            for (Class<?> plugin : plugins) {  // as OpenSearch 3's MockNode describes a class-path plugin
                infos.add(describe.newInstance(plugin.getName(), "classpath plugin", "NA", current, "1.8",
                        plugin.getName(), List.of(), false));
            }
            return infos;
        }

        static Class<?> firstPresent(List<String> names, String hint) throws ClassNotFoundException {
            for (String name : names) {
                try {
                    return Class.forName(name);
                } catch (ClassNotFoundException e) {
                    // try the next name
                }
            }
            throw new ClassNotFoundException("none of " + names + ": " + hint);
        }

        String version() throws Exception {
            return String.valueOf(Class.forName(pkg + ".Version").getField("CURRENT").get(null));
        }

        int transportPort(Object node) throws Exception {
            Class<?> nodeClass = Class.forName(pkg + ".node.Node");
            Object injector = nodeClass.getMethod("injector").invoke(node);
            Class<?> service = Class.forName(pkg + ".transport.TransportService");
            Object transport = Class.forName(pkg + ".common.inject.Injector").getMethod("getInstance", Class.class)
                    .invoke(injector, service);
            Object bound = service.getMethod("boundAddress").invoke(transport);
            Object publish = bound.getClass().getMethod("publishAddress").invoke(bound);
            return (int) publish.getClass().getMethod("getPort").invoke(publish);
        }

        int httpPort(Object node) throws Exception {
            // Methods are looked up on the public types: the implementations (InjectorImpl) are package-private.
            Class<?> nodeClass = Class.forName(pkg + ".node.Node");
            Object injector = nodeClass.getMethod("injector").invoke(node);
            Class<?> transport = Class.forName(pkg + ".http.HttpServerTransport");
            Object http = Class.forName(pkg + ".common.inject.Injector").getMethod("getInstance", Class.class)
                    .invoke(injector, transport);
            Object bound = transport.getMethod("boundAddress").invoke(http);
            Object publish = bound.getClass().getMethod("publishAddress").invoke(bound);
            return (int) publish.getClass().getMethod("getPort").invoke(publish);
        }

        void close(Object node) {
            try {
                Class<?> nodeClass = Class.forName(pkg + ".node.Node");
                nodeClass.getMethod("close").invoke(node);
                nodeClass.getMethod("awaitClose", long.class, TimeUnit.class).invoke(node, 20L, TimeUnit.SECONDS);
            } catch (ReflectiveOperationException e) {
                e.printStackTrace();
            }
        }
    }

    private static String value(String[] args, int i) {
        if (i >= args.length) {
            usage(args[i - 1] + " needs a value");
        }
        return args[i];
    }

    private static void usage(String problem) {
        System.err.println(problem + "\nusage: Launcher elasticsearch|opensearch [--http-port N] [--data DIR] "
                + "[--nodes N] [--stop-on-stdin-eof] [--setting key=value ...]");
        System.exit(2);
    }

    private static void deleteTree(Path root) {
        try {
            Files.walkFileTree(root, new SimpleFileVisitor<>() {
                @Override
                public FileVisitResult visitFile(Path file, BasicFileAttributes attrs) throws IOException {
                    Files.delete(file);
                    return FileVisitResult.CONTINUE;
                }

                @Override
                public FileVisitResult postVisitDirectory(Path dir, IOException exc) throws IOException {
                    Files.delete(dir);
                    return FileVisitResult.CONTINUE;
                }
            });
        } catch (IOException e) {
            System.err.println("could not delete " + root + ": " + e);
        }
    }
}
